"""`python -m bench.flops`: the cost model's FLOPs against what PyTorch's flop counter counts in the running model,
and the running model on this machine's measured roofline.

Counted / formula for the tiny model: prefill of 64, 256 and 1,024 tokens, exact and bounded (summed); decode steps
at three contexts (summed); a verify of 4 drafts; a chunked extend; a mixed step (its two parts). Each ratio must lie
in [0.98, 1.02]. Then the device's fp32 matmul peak and memory-copy bandwidth (on a CPU with one torch thread, as the
app runs; lessons.roofline.measure_machine), and the tiny model's prefill and decode step timed against that roof:
measured time over the bound (max of FLOPs / peak and bytes / bandwidth; 1 would be at the roof). On a CUDA device
the same figures come from the GPU and a `gpu:` line names the card; without one that line is left out.
"""

from __future__ import annotations

import argparse
import sys

import torch

from bench._common import add_device_option, line, pick_device, tiny_model


def main(argv: list[str] | None = None) -> int:
    from lessons.cost import Workload
    from lessons.cost_check import check_flops, measure_here
    from lessons.roofline import measure_machine

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_device_option(ap)
    ap.add_argument("--quick", action="store_true", help="skip the 1,024-token prefills")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (the bench shares the machine)")
    args = ap.parse_args(argv)
    device = pick_device(args.device)
    torch.set_num_threads(args.threads)  # an OpenMP team short of cores makes every op wait for its missing thread
    model, what = tiny_model(device)
    print(f"model: {what} on {device}")
    lengths = (64, 256) if args.quick else (64, 256, 1024)
    groups = {
        "prefill": [Workload("prefill", n, mode) for n in lengths for mode in ("exact", "bounded")],
        "decode": [Workload("decode", c) for c in (40, 300, 700)],
        "verify": [Workload("verify", 300, drafts=4)],
        "extend": [Workload("extend", 300, chunk=64)],
        "mixed": [Workload("mixed", 300, batch=2, chunk=64)],
    }
    ratios, ok = {}, True
    for name, wls in groups.items():
        counted = formula = 0.0
        for wl in wls:
            chk = check_flops(model, wl)
            counted += chk.counted
            formula += chk.formula
            ok &= chk.ok
            print(f"{wl.describe():58s} counted {chk.counted:>16,.0f}  formula {chk.formula:>16,.0f}  "
                  f"ratio {chk.ratio:.4f}{'' if not chk.unmatched else '  unmatched: ' + ', '.join(chk.unmatched)}")
        ratios[name] = counted / formula
    here = measure_here(model, measure_machine(device.type), prompt=512, steps=8)
    m = here.machine
    print(f"machine: {m.gflops:,.1f} GFLOP/s fp32 matmul, {m.gbs:,.1f} GB/s copy ({m.device}, "
          f"{torch.get_num_threads()} thread{'s' if torch.get_num_threads() > 1 else ''})")
    print(f"prefill 512: {here.prefill_s:.3f} s, {here.prefill_gflops:,.1f} GFLOP/s; decode step "
          f"{here.decode_s * 1e3:.2f} ms, {here.decode_bytes / 1e6:,.1f} MB moved")
    if device.type == "cuda":
        print(line("gpu", card=torch.cuda.get_device_name(device).replace(" ", "_"), peak_gflops=m.gflops,
                   gbs=m.gbs, prefill_over_bound=here.prefill_over_bound, decode_over_bound=here.decode_over_bound))
    else:
        print("no CUDA device here: the GPU line is left out")
    print(line("flops", prefill_ratio=f"{ratios['prefill']:.4f}", decode_ratio=f"{ratios['decode']:.4f}",
               verify_ratio=f"{ratios['verify']:.4f}", extend_ratio=f"{ratios['extend']:.4f}",
               mixed_ratio=f"{ratios['mixed']:.4f}", device=device.type, peak_gflops=m.gflops, gbs=m.gbs,
               prefill_over_bound=here.prefill_over_bound, decode_over_bound=here.decode_over_bound))
    return 0 if ok and all(0.98 <= r <= 1.02 for r in ratios.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
