"""`python -m bench.inspect`: how responsive the "Run a prompt" pages are on a 2,000-token prompt.

Measures, in one run on the tiny model (trained weights when shipped, else random ones):
- trace_2k: reading a 2,000-token prompt with the tracer on (bounded prefill, the inspector's default;
  exact too), i.e. what the inspector does once per prompt behind its progress bar;
- each interaction once the run is cached, as the lesson computations alone (layer view, overview per
  quantity, pool re-selection) and as whole page reruns through Streamlit's AppTest (step a layer,
  move the token, change the overview quantity, move the pool slider), which is what the reader waits for;
- the one-time costs around them (the pools page's full-detail trace and re-run, the trace JSON).
- a warm layer step (Next layer, the run cached) on the 307-token default prompt and on the long prompt, with the
  recall checkpoint's side beside it (asked for on the long prompt, as a reader does) and with the "Selected
  entries" tab open: what a reader waits for when stepping layer by layer to the fact (`--steps-only`: only this).
Last line: `inspect: trace_2k_s=… worst_interaction_s=… step_default_s=… step_long_s=…` (worst = slowest cached
page rerun; a step figure is the median of its warm steps, `_worst_s` the slowest).
Timings are wall-clock on this machine's CPU and include whatever else it is running (load shown).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def _model(weights: str):
    from model import load, random_tiny, shipped_weights
    from ui.session import trained_available

    if weights == "trained" or (weights == "auto" and trained_available()):
        return load(shipped_weights("text"), device="cpu"), "trained"
    return random_tiny(0, device="cpu"), "random"


def long_prompt(model, n: int = 2000) -> tuple[str, list[int]]:
    """Story text cut to exactly n tokens (held-out stories joined until long enough)."""
    from model.heldout import load_heldout_stories

    text, ids = "", []
    for row in sorted(load_heldout_stories(), key=lambda r: -len(r["text"])):
        text += row["text"] + "\n"
        ids = model.encode(text)
        if len(ids) >= n:
            break
    ids = ids[:n]
    return model.decode(ids), ids


def timed(fn, *a, repeat: int = 1, **kw):
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn(*a, **kw)
        best = min(best, time.perf_counter() - t0)
    return best, out


def layer_steps(kind: str, text: str | None, steps: int = 4, n_layers: int = 12) -> tuple[float, float]:
    """(median, slowest) of 2 x `steps` warm Next-layer steps on the inspector (AppTest), from the first decoder
    layer on: the run is cached after the first draw. The recall checkpoint's side is asked for where the page
    offers a button (a long prompt), and the steps are timed once on the Attention tab and once with "Selected
    entries" open."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "pages" / "inspector.py"), default_timeout=900)
    at.query_params["weights"] = kind
    if text is not None:
        at.query_params["prompt"] = text
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    ask = next((b for b in at.button if b.key == "insp_step_ask"), None)
    if ask is not None:                      # a long prompt: the reader asks for the other side
        ask.click().run()
    at.run()                                 # warm: every run of this prompt is cached now
    times: list[float] = []
    for tab in ("Attention", "Selected entries"):
        if "insp_tab" in at.session_state:
            at.session_state["insp_tab"] = tab
            at.run()
        for _ in range(steps):
            step = next(w for w in at.get("pagination") if w.key == "insp_layer_step")
            t0 = time.perf_counter()
            step.set_value(min(step.value + 1, n_layers)).run()         # 1-based pages: layer + 1
            times.append(time.perf_counter() - t0)
            assert not at.exception, [e.value for e in at.exception]
        step = next(w for w in at.get("pagination") if w.key == "insp_layer_step")
        step.set_value(n_layers - steps).run()  # back, for the next tab
    return statistics.median(times), max(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.inspect")
    ap.add_argument("--weights", choices=["auto", "trained", "random"], default="auto")
    ap.add_argument("--tokens", type=int, default=2000)
    ap.add_argument("--no-pages", action="store_true", help="skip the AppTest page reruns")
    ap.add_argument("--steps-only", action="store_true", help="only the warm layer steps (default and long prompt)")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)  # as the app does on CPU (ui.session): one intra-op thread per session

    from lessons import indexer_pools as pools, inspector as ins

    model, kind = _model(a.weights)
    text, ids = long_prompt(model, a.tokens)
    cfg = model.cfg
    print(f"tiny model ({kind} weights), prompt {len(ids)} tokens, {torch.get_num_threads()} threads, "
          f"load average {os.getloadavg()[0]:.1f}")
    if a.steps_only:
        (d, dw), (lo, low) = (layer_steps(kind, t, n_layers=cfg.num_hidden_layers) for t in (None, text))
        print(f"inspect: step_default_s={d:.3f} step_default_worst_s={dw:.3f} step_long_s={lo:.3f} "
              f"step_long_worst_s={low:.3f} long_tokens={len(ids)} load={os.getloadavg()[0]:.1f}")
        return 0
    rows: list[tuple[str, float]] = []

    t_b, run = timed(ins.run_prompt, model, ids, "bounded")
    rows.append(("trace 2k, bounded (once per prompt)", t_b))
    t_e, run_e = timed(ins.run_prompt, model, ids, "exact")
    rows.append(("trace 2k, exact (once per prompt)", t_e))
    t_g, _ = timed(ins.run_prompt, model, ids, "bounded", new_tokens=8)
    rows.append(("trace 2k + 8 generated tokens, bounded", t_g))

    lesson: list[tuple[str, float]] = []
    last = run_e.n - 1
    worst_view = max(timed(ins.layer_view, run_e, layer, pos, cfg, repeat=3)[0]
                     for layer in range(cfg.num_hidden_layers) for pos in (last, run_e.n // 2))
    lesson.append(("layer view (any layer, token)", worst_view))
    for q in ins.QUANTITIES:
        lesson.append((f"overview: {q} (first time; then memoised)", timed(ins._overview, run_e, q)[0]))
    t_json, js = timed(ins.trace_to_json, run.trace, run.tokens, include_scores=False)
    rows.append((f"trace JSON without scores ({len(js) / 1e6:.1f} MB, on download)", t_json))

    t_full, tr = timed(pools.trace_for_pools, model, ids, "exact")
    t_rerun, inp = timed(pools.reindex_inputs, model, tr)
    rows.append(("pools: full-detail trace (once per prompt)", t_full))
    rows.append(("pools: re-run of the Reindex layers (once per prompt)", t_rerun))
    for nb, k in ((cfg.candidate_topk_blocks, cfg.index_topk), (2, 4), (64, cfg.index_topk)):
        t, res = timed(pools.reselect, inp, nb, k)
        t2, _ = timed(pools.summary_rows, inp, res)
        lesson.append((f"pools: re-select pool={nb} k={k} + summary", t + t2))

    page: list[tuple[str, float]] = []
    if not a.no_pages:
        from streamlit.testing.v1 import AppTest

        def app(name: str, **qp) -> AppTest:
            at = AppTest.from_file(str(ROOT / "pages" / f"{name}.py"), default_timeout=600)
            at.query_params["weights"] = kind
            for k_, v in qp.items():
                at.query_params[k_] = str(v)
            return at

        at = app("inspector", prompt=text)
        rows.append(("inspector page, first run (loads the model, traces)", timed(at.run)[0]))
        assert not at.exception, [e.value for e in at.exception]
        page.append(("inspector: rerun, nothing changed", timed(at.run)[0]))
        layer_step = next(w for w in at.get("pagination") if w.key == "insp_layer_step")
        page.append(("inspector: Next layer", timed(layer_step.set_value(layer_step.value + 1).run)[0]))
        layer_step = next(w for w in at.get("pagination") if w.key == "insp_layer_step")
        page.append(("inspector: Back layer", timed(layer_step.set_value(layer_step.value - 1).run)[0]))
        page.append(("inspector: token -> middle", timed(at.slider(key="insp_token").set_value(len(ids) // 2).run)[0]))
        page.append(("inspector: overview quantity", timed(at.selectbox(key="insp_quantity")
                                                           .set_value("attention entropy").run)[0]))
        page.append(("inspector: one head", timed(at.radio(key="insp_head").set_value("head 1").run)[0]))
        assert not at.exception, [e.value for e in at.exception]
        at = app("indexer_pools", prompt=text)
        rows.append(("pools page, first run (full trace + re-run)", timed(at.run)[0]))
        assert not at.exception, [e.value for e in at.exception]
        page.append(("pools: pool slider", timed(at.slider(key="pool_nb").set_value(2).run)[0]))
        page.append(("pools: k slider", timed(at.slider(key="pool_k").set_value(4).run)[0]))
        page.append(("pools: query token", timed(at.select_slider(key="pool_token").set_value(len(ids) // 2).run)[0]))
        assert not at.exception, [e.value for e in at.exception]

    print(f"\n{'one-time work':62} {'seconds':>8}")
    for name, t in rows:
        print(f"{name:62} {t:8.3f}")
    print(f"\n{'interaction: lesson computation only':62} {'seconds':>8}")
    for name, t in lesson:
        print(f"{name:62} {t:8.3f}")
    if page:
        print(f"\n{'interaction: whole page rerun (AppTest, cached run)':62} {'seconds':>8}")
        for name, t in page:
            print(f"{name:62} {t:8.3f}")
    worst = max(t for _, t in (page or lesson))
    steps = ""
    if not a.no_pages:
        (d, dw), (lo, low) = (layer_steps(kind, t, n_layers=cfg.num_hidden_layers) for t in (None, text))
        steps = (f" step_default_s={d:.3f} step_default_worst_s={dw:.3f} step_long_s={lo:.3f} "
                 f"step_long_worst_s={low:.3f}")
    print(f"inspect: trace_2k_s={t_b:.2f} trace_2k_exact_s={t_e:.2f} worst_interaction_s={worst:.3f} "
          f"worst_lesson_s={max(t for _, t in lesson):.3f}{steps} load={os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
