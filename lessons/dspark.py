"""The DSpark page's lesson: draft, then verify, with the acceptance statistics of a real run.

Follows docs/design/equations.md §11 (the rules and the expected-tokens formula) and §12 (DSpark's
block drafter, Markov head, confidence head). Pure computations: each takes plain values or the
`SpecStats` / `StepLog` of `model.inference.speculative` and returns rows a page can draw or tabulate, with the
formula that produced each number.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from model.inference import SpecStats, StepLog, expected_tokens_per_pass, residual, verify

from .units import counted

INTRO = (
    "Producing text one token per pass leaves most of a big model's arithmetic idle: each pass reads all the "
    "weights that token uses from memory (in a mixture-of-experts model, the active ones: the shared parts and "
    "the chosen experts) to make a single token. DSpark lets a small drafter guess the next few tokens at once, "
    "and the big model then checks all the guesses in one pass. A guess the big model keeps is not free: it saves one "
    "sequential pass of the big model, but it was paid for with drafter work and with a wider checking pass "
    "(one row per guess). Whether that nets out faster is measured, not assumed: the whole run at the bottom "
    "of this page times both ways. The first guess the big model disagrees with is replaced by a token of its "
    "own, and the guesses after it are thrown away, together with the cache rows they wrote."
)


def active_sentence(active_decode: int, backbone: int) -> str:
    """The size of one decode pass's reads in the release (count_params), beside the stored backbone."""
    return (f"For DeepSeek-V4.1-Flash that is about {active_decode / 1e9:.1f}B active parameters per decoded token, "
            f"out of {backbone / 1e9:.0f}B stored in the backbone (counted from the released config).")


def block_sentence(block_size: int) -> str:
    """What one DSpark block holds, in the same words on every page (Figure 3, DSpark)."""
    return (f"A DSpark block has {block_size} positions: the anchor (the last token the main model produced) "
            f"plus up to {block_size - 1} drafted tokens.")


AUTO_NOTE = (
    "'auto' is a simplification of DSpark's scheduler: it stops drafting at the first position whose running "
    "product of confidences falls below the threshold. The scheduler described for DSpark ranks positions of "
    "all requests in a batch by that product and keeps admitting them while the expected number of accepted "
    "tokens times the measured throughput for that batch size still grows; with one request and no throughput "
    "table, only the threshold rule is left."
)

DEFINITIONS = [
    ("Anchor", "The last token the big model produced. The drafter starts its block from it; the big model "
               "has not read it yet, so it goes first in the checking pass."),
    ("Block", "The anchor followed by placeholder (noise) tokens at the next positions: the anchor plus up to "
              "block size - 1 drafted tokens. The drafter fills every placeholder in one parallel pass, reading "
              "the big model's hidden states of the recent context."),
    ("Markov head", "A cheap correction applied left to right: the token just drafted nudges the scores of the "
                    "next one, so the guesses in a block fit together."),
    ("Confidence", "The drafter's own estimate that a guess survives, given that the guesses before it did. "
                   "Multiplying them gives the chance that a whole prefix survives; drafting can stop when that "
                   "product gets too small."),
    ("Verification", "Greedy: keep guesses while they equal the big model's top choice. Sampling: keep guess x "
                     "with probability min(1, p(x)/q(x)); on a refusal draw from what p has left over q, "
                     "norm(max(0, p - q)). Either way the text has exactly the big model's distribution."),
    ("Rollback", "The checking pass wrote a cache row for every guess. Rows of refused guesses are dropped "
                 "again, so the cache is what it would be had they never been proposed."),
]


# The two verification rules, as the step-through page states them.
RULE_TEXT = {
    "greedy": "Greedy rule: draft j is accepted when it equals the target's most likely token at that position. "
              "At the first mismatch the target's own choice replaces it and the step ends; if every draft "
              "matches, the target adds one more (bonus) token.",
    "stochastic": "Stochastic rule: draw u uniformly in [0, 1); accept draft j when u < min(1, p_j(x)/q_j(x)). On "
                  "rejection, draw a replacement from max(0, p_j - q_j), normalised, and end the step; if all drafts "
                  "pass, draw a bonus token from p. The output then follows exactly the target's distribution.",
}


@dataclass
class Explained:
    label: str
    value: float
    formula: str


@dataclass
class PositionRow:
    position: int              # draft position j (1-based)
    reached: int               # steps that checked position j
    accepted: int              # ... and kept it
    rate: float                # accepted / reached: P(accept j | drafts before j accepted)
    predicted: float           # mean confidence at j over those steps
    survival_observed: float   # share of steps drafting >= j tokens whose first j were all kept
    survival_predicted: float  # mean running product of confidences there


# ------------------------------------------------------------------------------------------------
# Formulas
# ------------------------------------------------------------------------------------------------

def acceptance(p: torch.Tensor, q: torch.Tensor) -> float:
    """Chance one drafted token is kept under the sampling rule: sum_x min(p(x), q(x)) = 1 - TV(p, q)."""
    return float(torch.minimum(p.float(), q.float()).sum())


def leftover(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Where a refused position draws from: norm(max(0, p - q))."""
    return residual(p, q)


def expected_tokens(alpha: float, gamma: float) -> float:
    """Tokens per big-model pass with g guesses each kept with chance a: (1 - a^(g+1)) / (1 - a)."""
    return expected_tokens_per_pass(alpha, gamma)


def walltime_factor(alpha: float, gamma: float, cost_ratio: float) -> float:
    """Speed-up when a drafter step costs `cost_ratio` of a big-model pass: E[tokens] / (g c + 1)."""
    return expected_tokens(alpha, gamma) / (gamma * cost_ratio + 1)


def survival(confidences: list[float]) -> list[float]:
    """Running products of the confidences: the predicted chance that the first j guesses all survive."""
    out, run = [], 1.0
    for c in confidences:
        run *= c
        out.append(run)
    return out


def auto_length(confidences: list[float], threshold: float) -> int:
    """Guesses to send for checking: stop before the first position whose running product < threshold."""
    n = 0
    for s in survival(confidences):
        if s < threshold:
            break
        n += 1
    return n


def formula_table(alpha: float, gammas: range | list[int] = range(1, 9), cost_ratio: float = 0.1) -> list[dict]:
    return [{"guesses": g, "tokens_per_pass": expected_tokens(alpha, g),
             "speedup": walltime_factor(alpha, g, cost_ratio)} for g in gammas]


# ------------------------------------------------------------------------------------------------
# A run's statistics
# ------------------------------------------------------------------------------------------------

def position_rows(stats: SpecStats) -> list[PositionRow]:
    return [PositionRow(c.position, stats.reached[c.position - 1], stats.accepted_at[c.position - 1], c.observed,
                        c.predicted, c.observed_survival, c.predicted_survival) for c in stats.calibration]


def passes_help(target_passes: int, checking: int) -> str:
    """How the target-pass count splits, so it agrees with the table's checking passes."""
    return (f"{target_passes} = 1 pass over the prompt (prefill), which also gives the first token, + {checking} "
            "checking passes (one per draft-and-verify step)")


def summary_rows(stats: SpecStats, plain_seconds: float | None = None,
                 plain_tokens: int | None = None) -> list[Explained]:
    g = stats.mean_draft_length
    rows = [
        Explained("checking passes", stats.steps, "one big-model pass per draft-and-verify step (the target passes "
                  "above add 1: the prefill pass that made the first token)"),
        Explained("guesses checked", sum(stats.reached), "positions the rules looked at"),
        Explained("guesses kept", stats.accepted, "sum over steps of the accepted prefix length k"),
        Explained("acceptance a", stats.alpha, "kept / checked"),
        Explained("mean guesses per step g", g, "drafted / steps"),
        Explained("tokens per pass (measured)", stats.tokens_per_pass, "emitted / steps = 1 + mean k"),
        Explained("tokens per pass (formula)", stats.formula_tokens_per_pass,
                  f"(1 - a^(g+1)) / (1 - a) with a = {stats.alpha:.3f}, g = {g:.2f}"),
        Explained("drafter seconds", stats.draft_seconds, "sum over steps"),
        Explained("checking seconds", stats.verify_seconds, "sum over steps"),
    ]
    if plain_seconds is not None and plain_tokens:
        spec_rate = (stats.emitted + 1) / max(1e-9, stats.wall_seconds - stats.prefill_seconds)
        plain_rate = plain_tokens / max(1e-9, plain_seconds)
        rows.append(Explained("speed-up vs one token per pass", spec_rate / plain_rate,
                              "tokens per second with drafting / without"))
    return rows


def keep_chance(p: float, q: float, guess: int, target_top: int, greedy: bool) -> float:
    """The chance the active rule keeps a guess: greedy 1 or 0 (is it the target's top token?); stochastic
    min(1, p/q) (1 when q is 0, as `model.inference.speculative.verify` does)."""
    if greedy:
        return 1.0 if guess == target_top else 0.0
    return 1.0 if q <= 0 else min(1.0, p / q)


def step_rows(step: StepLog, decode=None, greedy: bool | None = None) -> list[dict]:
    """One row per drafted guess, then the token the big model added (correction or bonus).

    Guesses after the first refusal were never checked: their "keep chance" is empty. The verify pass did
    compute p for them, so p is kept, and the chance the active rule would have given them is shown in its
    own column, marked hypothetical. `greedy` names the active rule (default: greedy when the step drew no
    uniforms, as `verify` does only under the stochastic rule)."""
    text = decode or (lambda t: str(t))
    if greedy is None:
        greedy = not step.uniforms
    rows = []
    for j, x in enumerate(step.drafted):
        checked = j < len(step.rules)
        chance = keep_chance(step.p_draft[j], step.q_draft[j], x, step.target_top[j], greedy)
        if checked and not greedy and j < len(step.ratios):
            chance = step.ratios[j]
        rows.append({
            "position": j + 1, "guess": x, "text": text(x), "q(guess)": step.q_draft[j], "p(guess)": step.p_draft[j],
            "keep chance": chance if checked else None,
            "hypothetical keep chance (never checked)": None if checked else chance,
            "draw": step.uniforms[j] if j < len(step.uniforms) else None,
            "confidence": step.confidence[j] if j < len(step.confidence) else None,
            "verdict": step.rules[j] if checked else "not checked (after a refusal)",
        })
    last = step.resampled if step.resampled is not None else step.bonus
    if step.resampled is None:
        kind = "bonus (all guesses kept)"
    elif greedy:
        kind = "correction (the target's own top token)"
    else:
        kind = "correction (drawn from the leftover norm(max(0, p - q)))"
    rows.append({"position": step.accepted + 1, "guess": last, "text": text(last), "q(guess)": None,
                 "p(guess)": None, "keep chance": None, "hypothetical keep chance (never checked)": None, "draw": None,
                 "confidence": None, "verdict": kind})
    return rows


def cache_rows(step: StepLog) -> list[Explained]:
    return [Explained("rows written by the checking pass", step.rows_appended, "anchor + guesses"),
            Explained("rows rolled back", step.rows_rolled_back, "refused guesses (and rows after an end token)"),
            Explained("cache length after", step.cache_length, "prompt + tokens the big model has read")]


# ------------------------------------------------------------------------------------------------
# Why the sampling rule is lossless: a simulation the page can run
# ------------------------------------------------------------------------------------------------

@dataclass
class Simulation:
    target: list[float]       # p
    draft: list[float]        # q
    empirical: list[float]    # share of each token among the first tokens emitted per step
    acceptance: float         # measured share of kept guesses
    predicted_acceptance: float

    def sentence(self) -> str:
        return (f"Kept guesses: {self.acceptance:.3f} of the steps; sum(min(p, q)) predicts "
                f"{self.predicted_acceptance:.3f}.")


def simulate(p: list[float], q: list[float], n: int = 5000, seed: int = 0) -> Simulation:
    """n one-guess steps: draw x ~ q, apply the rule against p, count the emitted first token."""
    pt = torch.tensor(p, dtype=torch.float32)
    qt = torch.tensor(q, dtype=torch.float32)
    if pt.shape != qt.shape or pt.ndim != 1 or (pt < 0).any() or (qt < 0).any():
        raise ValueError("p and q must be non-negative lists of the same length")
    if float(pt.sum()) <= 0 or float(qt.sum()) <= 0:
        raise ValueError("p and q must each have a positive total")
    pt, qt = pt / pt.sum(), qt / qt.sum()
    g = torch.Generator().manual_seed(seed)
    counts = torch.zeros_like(pt)
    kept = 0
    pp = pt.expand(2, -1)
    for _ in range(n):
        x = int(torch.multinomial(qt, 1, generator=g))
        v = verify(pp, qt.view(1, -1), [x], False, g)
        counts[v.tokens[0]] += 1
        kept += v.accepted
    return Simulation(pt.tolist(), qt.tolist(), (counts / n).tolist(), kept / n, acceptance(pt, qt))


# a small fixed pair the DSpark page simulates: the draft favours the wrong end of the target
SIM_P = (0.40, 0.25, 0.15, 0.10, 0.06, 0.04)
SIM_Q = (0.05, 0.10, 0.15, 0.20, 0.20, 0.30)

SIM_TEXT = (
    "Why the stochastic rule changes nothing about the output: below, a draft q that favours the wrong "
    "tokens proposes one guess per step against a fixed target p. The rule keeps a guess with chance "
    "min(1, p/q) and otherwise draws from the leftover norm(max(0, p - q)). Count the first token each step "
    "emits: its shares come out at p, not q, while only about sum(min(p, q)) of the guesses are kept."
)


def simulation_rows(sim: Simulation) -> list[dict]:
    """One row per token: target p, draft q, and the share of steps that emitted it."""
    return [{"token": i, "target p": p, "draft q": q, "emitted share": e}
            for i, (p, q, e) in enumerate(zip(sim.target, sim.draft, sim.empirical))]


# ---- the page's other texts ------------------------------------------------------------------------------------------
NO_DRAFTER = "This model's config has no drafter (num_nextn_predict_layers = 0)."
RANDOM_DRAFTER = ("These weights have no trained drafter, so a random one is used: expect most drafts to be rejected. "
                  "The rules, the cache bookkeeping and the statistics work the same way.")
PRESS_START = "Press Start: the target reads the prompt, emits its first token, and the drafter is ready."
NO_DRAFTS = "No drafts this step (the confidence or the token limit stopped the drafter): a plain step."
ALL_ACCEPTED = "Every draft accepted; the target adds a bonus token:"
WHOLE_RUN = ("The same prompt and settings, run to the end, and the same request decoded plainly (one target pass per "
             "token) for comparison.")
PLAIN_PASSES = "1 pass over the prompt, which gives the first token, + 1 pass per further token"
GREEDY_DIFFERS = "Greedy speculative decoding should reproduce plain greedy decoding token for token; it did not here."
SAMPLED_DIFFERS = ("With the stochastic rule the output follows the target's distribution, but the random draws differ "
                   "from plain sampling, so the tokens need not be identical.")


def limit_why(new_tokens: int, block_size: int, positions: int, tight: bool) -> str:
    """What the prompt limit is for (`tight`: the new tokens and the block leave less room than the page's limit)."""
    return (f"with {new_tokens} new tokens and the drafter's block of {block_size} inside the model's "
            f"{positions:,} positions, this page" if tight else "this page")


def state_caption(prompt_tokens: int, cache_length: int, steps: int, done: bool) -> str:
    return (f"Prompt {prompt_tokens} tokens; cache length {cache_length}; {steps} steps"
            + ("; done." if done else "; next anchor (the last emitted token, not yet in the cache):"))


def step_sentence(i: int, step: StepLog) -> str:
    """Step `i` (1-based) in one sentence: how many drafts, one target pass, how many kept."""
    n = len(step.drafted)
    return (f"Step {i}: the drafter proposed {counted(n, 'token')} after the anchor; the target "
            f"checked {'it' if n == 1 else 'them'} in one pass and accepted {step.accepted}.")


def rejected(step: StepLog) -> str:
    return (f"Draft {step.accepted + 1} REJECTED; the rest of the block is discarded and the target's "
            "replacement token is:")


def measured_sentence(stats: SpecStats) -> str:
    """The measured tokens per verify pass against the formula's assumption."""
    return (f"Measured: {stats.tokens_per_pass:.2f} tokens per verify pass, mean accepted length "
            f"{stats.mean_accepted_length:.2f} of {stats.mean_draft_length:.2f} drafted. The formula assumes every "
            "position is accepted independently with the same α; the per-position rates below show how far that "
            "holds.")
