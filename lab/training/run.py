"""A language-model training run, step by step: start (build the model, initialise from a previous
phase, resume from a checkpoint), the step loop (progress, evaluations, checkpoints every
`ckpt_every` steps), and finish (the DSpark drafter against the frozen target, the final weights
and training.json with every phase's command, tokens and wall time). `python -m lab train` is
its command line (lab/cli/train.py).

Deterministic for a seed: batch n comes from a generator seeded with (seed, n), so a resumed run sees
the same batches as an uninterrupted one (lab/training/batches.py).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from tokenizers import Tokenizer

from model.checkpoint.native import save_checkpoint
from model.model import V41Model
from model.tokenizer import load_tokenizer

from ..corpus.dataset import TokenStream
from .batches import make_batch, story_object_ids
from .drafter import train_drafter
from .evaluation import EVAL_KEYS, copy_probe, kv_probe, quick_eval
from .schedule import Stage, TrainConfig, parse_curriculum, window_at
from .state import init_from, load_state, read_meta, rounded, save_state, save_weights_bf16
from .step import EntryProbe, build_model, freeze_except, make_optimizer, set_window, train_step


@dataclass
class Run:
    """A training run in progress: its settings, data, model and optimizer, and the steps done so far."""

    tc: TrainConfig
    tok: Tokenizer
    stream: TokenStream
    model: V41Model
    opt: torch.optim.Optimizer
    device: torch.device
    ckpt_dir: Path
    start: int = 0                       # the step this process started at (> 0 when resumed)
    log: list[dict] = field(default_factory=list)
    previous: dict | None = None         # the phase this run was initialised from (--init-from)
    stages: list[Stage] = field(default_factory=list)   # the gated curriculum (empty: none)
    stage: int = 0                       # the stage being trained
    stage_start: int = 0                 # the step it started at
    passed: list[dict] = field(default_factory=list)    # one record per stage passed (step, probe, weights)
    finished: bool = False               # the last stage passed: nothing left to train
    tokens_this_process: int = 0         # for the progress line's rate
    probe: EntryProbe | None = None      # the entry probe's read-out (a run with entry_weight > 0; never saved)

    def stage_config(self) -> TrainConfig:
        """The run's settings with the current stage's applied (the last stage's once all passed)."""
        if not self.stages:
            return self.tc
        return self.stages[min(self.stage, len(self.stages) - 1)].apply(self.tc)

    def where(self) -> dict:
        """Where the curriculum stands, saved with each checkpoint."""
        return {"stage": self.stage, "stage_start": self.stage_start, "passed": self.passed}

    end_step: int = 0                    # set when the curriculum ends the run early

    @property
    def end(self) -> int:
        """The last step of this process: `stop_at` cuts a run short keeping the schedule of `steps`; a
        finished curriculum ends it where its last stage passed."""
        return self.end_step or min(self.tc.stop_at or self.tc.steps, self.tc.steps)

    @property
    def tokens_per_step(self) -> int:
        """Tokens in one step of the current stage (of the run without a curriculum)."""
        ts = self.stage_config()
        return ts.batch * ts.seq_len

    def tokens_done(self) -> int:
        """Tokens trained so far: each logged step's own count (a curriculum's rows change by stage; a log
        written before steps recorded it counts the run's batch x seq_len)."""
        return sum(r.get("tokens", self.tc.batch * self.tc.seq_len) for r in self.log)


def start_run(tc: TrainConfig, device: torch.device, ckpt_dir: Path, resume: bool) -> Run:
    """Build the model and optimizer, initialise from `tc.init_from`, resume from `ckpt_dir` if asked."""
    tok = load_tokenizer(tc.tokenizer)
    m = build_model(tc, tok).to(device)
    if tc.init_from:
        previous = init_from(m, Path(tc.init_from))
        print(f"initialised from {tc.init_from}", file=sys.stderr)
    if tc.train_only:
        print(f"training {freeze_except(m, tc.train_only)} tensors matching {tc.train_only!r}", file=sys.stderr)
    stages = parse_curriculum(tc.curriculum)
    probe = None
    if tc.entry_weight > 0 or any(st.settings.get("entry_weight", 0) > 0 for st in stages):
        # the read-out has its own optimizer group; it starts afresh on a resume (not part of the model's weights)
        probe = EntryProbe(m, story_object_ids(tok)).to(device)
    run = Run(tc, tok, TokenStream.load(tc.stream), m, make_optimizer(m, tc, probe), device, ckpt_dir,
              stages=stages, stage=tc.start_stage, probe=probe)
    run.previous = previous if tc.init_from else None
    if resume and (ckpt_dir / "ckpt.safetensors").exists():
        run.start, run.log = load_state(ckpt_dir, m, run.opt)
        meta = read_meta(ckpt_dir)
        run.stage, run.stage_start = meta.get("stage", run.stage), meta.get("stage_start", 0)
        run.passed = meta.get("passed", [])
        print(f"resumed from {ckpt_dir} at step {run.start}", file=sys.stderr)
    return run


def train_steps(run: Run) -> float:
    """Steps start..end with a progress line, quick evaluations every `eval_every` steps and checkpoints
    every `ckpt_every` (both also at the end). Returns the wall seconds."""
    tc, m = run.tc, run.model
    t0 = time.time()
    n_params = sum(p.numel() for p in m.parameters())
    print(f"training {tc.preset}: {n_params / 1e6:.2f}M parameters, {tc.steps} steps x {run.tokens_per_step} tokens "
          f"on {run.device} ({torch.get_num_threads()} threads)", file=sys.stderr)
    for step in range(run.start, run.end):
        ts = run.stage_config()
        x, y, answers, sources = make_batch(ts, run.stream, run.tok, step)
        set_window(m, window_at(ts, step))
        rec = train_step(m, run.opt, x.to(run.device), y.to(run.device), ts, step, answers, sources, run.probe)
        rec["step"], rec["tokens"] = step + 1, x.numel()
        _progress(run, rec, step, time.time() - t0)
        if run.stages:
            rec["stage"] = run.stage
            _gate(run, ts, step, rec)
        out_of_time = tc.max_minutes and time.time() - t0 >= 60 * tc.max_minutes
        if run.finished or out_of_time:     # the curriculum's last stage passed, or the time box ran out:
            run.end_step = step + 1         # this step is the last (evaluated, saved)
        last = step + 1 == run.end
        if tc.eval_every and ((step + 1) % tc.eval_every == 0 or last):
            rec.update(quick_eval(m, run.tok, tc.seq_len, window=window_at(ts, step) if run.stages else 0))
            print("\n  eval: " + ", ".join(f"{k} {v:.3f}" for k, v in rec.items() if k.startswith(EVAL_KEYS)),
                  file=sys.stderr)
        run.log.append(rec)
        if (step + 1) % tc.ckpt_every == 0 or last:
            save_state(run.ckpt_dir, m, run.opt, step + 1, tc, run.log, run.where())
        if last:
            break
    print(file=sys.stderr)
    return time.time() - t0


def _gate(run: Run, ts: TrainConfig, step: int, rec: dict) -> None:
    """Every `gate_every` steps of a stage (after its first `gate_min_steps`), probe copies at the stage's
    longest distances (key-value lookups instead when the stage drills those and no copies); at `gate` or better
    the stage is passed: its weights are written (bf16, under `stage_dir`), and the next stage starts (the run
    ends after the last)."""
    done = step + 1 - run.stage_start
    if done < ts.gate_min_steps or done % run.tc.gate_every:
        return
    if ts.kv_frac > 0 and ts.copy_frac == 0:
        rec.update(kv_probe(run.model, ts, run.stream, step=step, tok=run.tok))
        rec.update(kv_probe(run.model, ts, run.stream, broad=True, step=step, tok=run.tok))
    else:
        rec.update(copy_probe(run.model, ts, run.stream, step=step))
        rec.update(copy_probe(run.model, ts, run.stream, broad=True, step=step))
    print(f"\n  stage {run.stage} step {step + 1}: " + ", ".join(f"{k} {v:.3f}" for k, v in rec.items()
                                                            if k.startswith("probe")), file=sys.stderr)
    if rec["probe"] < ts.gate:
        return
    entry = {"stage": run.stage, "settings": run.stages[run.stage].settings, "passed_at_step": step + 1,
             "steps_in_stage": done, **{k: v for k, v in rec.items() if k.startswith("probe")}}
    if run.tc.stage_dir:
        entry["weights"] = str(save_weights_bf16(run.model, Path(run.tc.stage_dir) / f"stage{run.stage}", entry,
                                                 run.tc.tokenizer))
    run.passed.append(entry)
    print(f"  stage {run.stage} passed at step {step + 1}", file=sys.stderr)
    run.stage, run.stage_start = run.stage + 1, step + 1
    run.finished = run.stage >= len(run.stages)


def _progress(run: Run, rec: dict, step: int, elapsed: float) -> None:
    steps = run.tc.steps
    done = step + 1 - run.start
    run.tokens_this_process += rec["tokens"]
    rate = run.tokens_this_process / elapsed
    eta = (steps - step - 1) * elapsed / done
    if run.tc.max_minutes:                  # a time-boxed run ends at its limit, whatever the schedule says
        eta = min(eta, max(0.0, 60 * run.tc.max_minutes - elapsed))
    bar = "#" * int(30 * (step + 1) / steps)
    lookup = f" lookup {rec['lookup']:.3f}" if "lookup" in rec else ""
    lookup += f" entry {rec['entry']:.3f}" if "entry" in rec else ""
    lookup += f" select {rec['select']:.3f}" if "select" in rec else ""
    print(f"\r[{bar:<30}] {step + 1}/{steps} loss {rec['loss']:.3f} kl {rec['indexer_kl']:.3f}{lookup} "
          f"{rate:,.0f} tok/s eta {eta / 60:.1f} min", end="", file=sys.stderr, flush=True)


def finish(run: Run, out: Path, command: str, train_seconds: float) -> None:
    """Train the drafter (when the config has one and `drafter_steps` > 0), write the final weights, the
    tokenizer and training.json into `out`."""
    tc, m = run.tc, run.model
    set_window(m, 0)
    m.eval()
    drafter_info = None
    if tc.drafter_steps and m.cfg.num_nextn_predict_layers:
        drafter_info = train_drafter(m, run.stream, steps=tc.drafter_steps, seed=tc.seed, log=sys.stderr)
    save_checkpoint(m, out, tokenizer=None, metadata={"trained_by": "python -m lab train"})
    if Path(tc.tokenizer).resolve() != (out / "tokenizer.json").resolve():
        shutil.copy(tc.tokenizer, out / "tokenizer.json")
    info = training_record(run, command, train_seconds, drafter_info)
    (out / "training.json").write_text(json.dumps(info, indent=1) + "\n")
    print(f"wrote {out} (training {train_seconds / 60:.1f} min)", file=sys.stderr)


def training_record(run: Run, command: str, train_seconds: float, drafter_info: dict | None) -> dict:
    """training.json: the command, settings, data, machine, final evaluation, the drafter's record,
    every phase so far and the log of every step."""
    tc, end = run.tc, run.end
    final = run.log[-1] if run.log else {}
    # A run initialised from shipped weights carries their phase list forward and adds itself,
    # so training.json keeps every phase's command, tokens and wall time.
    prior = Path(tc.init_from) / "training.json" if tc.init_from else None
    phases = json.loads(prior.read_text()).get("phases", []) if prior is not None and prior.exists() else []
    phases = phases + [{"run": str(run.ckpt_dir), "steps_done": end, "schedule_steps": tc.steps,
                        "tokens": run.tokens_done(),
                        "command": command,
                        "wall_seconds_last_segment": round(train_seconds, 1), "resumed_at_step": run.start or None,
                        "last_eval": {k: v for k, v in final.items() if k.startswith(EVAL_KEYS)}}]
    return {
        "command": command,
        "seed": tc.seed, "preset": tc.preset, "train_config": asdict(tc),
        "data": {"stream": tc.stream, "manifest": run.stream.manifest, "tokenizer": tc.tokenizer},
        "steps": end, "tokens": run.tokens_done(), "parameters": sum(p.numel() for p in run.model.parameters()),
        "wall_seconds": round(train_seconds, 1), "resumed_at_step": run.start or None,
        "machine": {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
                    "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(), "device": str(run.device),
                    "torch": torch.__version__},
        "final": {k: v for k, v in final.items() if isinstance(v, (int, float))},
        "drafter": drafter_info,
        "previous_phase": run.previous,
        "curriculum": {"spec": tc.curriculum, "passed": run.passed, "stage_reached": run.stage} if run.stages else None,
        "phases": phases,
        "log_every_step": rounded(run.log),
    }
