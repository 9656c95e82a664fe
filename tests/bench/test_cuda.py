"""bench.cuda, the GPU check (bench/cuda.py): it must keep working on machines without a GPU too, so its parts
run here on the CPU against the same references."""

from __future__ import annotations

import pytest
import torch


def test_without_a_gpu_it_says_so_and_measures_nothing(capsys):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the bench measures instead")
    from bench.cuda import main

    assert main([]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == "cuda: available=0"


@pytest.mark.slow
def test_parity_part_reads_the_golden_fixture():
    from bench.cuda import parity

    assert parity(torch.device("cpu")) < 1e-4


@pytest.mark.slow
def test_cpu_against_device_part_finds_no_difference_on_one_device():
    from bench._common import TINY
    from bench.cuda import cpu_against_gpu

    got = cpu_against_gpu(TINY, torch.device("cpu"), tokens=200)
    assert got["max_diff"] == 0.0 and got["decode_same"] == 1 and got["cpu_s"] > 0
