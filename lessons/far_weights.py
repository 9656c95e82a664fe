"""What a set of trained weights does on far recall, said before the far-fact panel measures one story: the figures
their training record states (its "measured" part, what `lab.probes.quality --record` measured on the file as shipped,
or else its "final" part, the run's last quick evaluation), the verdict they support, and what each shipped set
is, learned and was trained with (lessons/how_trained.py reads that from the same record). Pure text from plain
records; it does not run a model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lessons.how_trained import text_share, training_clause
from model.heldout import BUCKETS, COLOURS

CHANCE = 1 / len(COLOURS)    # a guess among the story colours


def no_better_than_guess(far: float) -> bool:
    """Far recall within twice the chance of a guess: not evidence that recall has emerged."""
    return far <= 2 * CHANCE


NO_RECORD = ("These weights came without a training record that states their far recall, so what "
             "they do on far facts is not known until a far-fact panel measures one story.")


def weights_note(weights: str, record: dict | None) -> str:
    """What the loaded weights do on far recall, said before any measurement on this page: for trained weights (the
    shipped ones or a chosen checkpoint), the held-out far recall recorded in their training.json (`record`: its
    "measured" entry, what `lab.probes.quality --record` measured on the file as shipped, or else its "final" entry, the
    run's last quick evaluation) and what else that benchmark measured on them; for random weights, that nothing is
    learned; for weights without a record, that it is not known."""
    chance = f"{100 * CHANCE:.1f}%"
    if weights == "random":
        return (f"Random weights: nothing is learned, so every answer here is a guess (chance among {len(COLOURS)} "
                f"colours: {chance}). The far-fact panels show the machinery, not a behaviour.")
    steps = (record or {}).get("tokens")
    device = str(((record or {}).get("machine") or {}).get("device", "cpu"))
    on = "a GPU" if device.startswith("cuda") else "a CPU"      # where the last phase ran, as its record says
    phase = f" (their last training phase: {steps:,} tokens on {on})" if isinstance(steps, int) else ""
    said = _far_part(record)     # one figure per set of weights on every page: the one `far_recall_of` reads
    if said is None:
        return NO_RECORD
    when = (f"measured on the shipped file{phase}, they recall" if said is (record or {}).get("measured") else
            f"at the end of their training{phase} they recalled")
    far = said["recall_far"]
    # by distance, not "inside the window": the buckets are fixed token ranges, the loaded window may be narrower
    other = [f"{100 * said[f'recall_{b}']:.0f}% of facts {BUCKETS[b][0]}-{BUCKETS[b][1]} tokens back"
             for b in ("inside", "just_past") if f"recall_{b}" in said]
    verdict = (_no_recall(said) + ", so expect the fact to be missed; the far-fact panels show where it is missed."
               if no_better_than_guess(far) else
               "That is clearly above a guess; the far-fact panels show, for one story, which road the answer took.")
    return (f"What these weights do: {when} {100 * far:.0f}% of held-out far facts"
            + (f" (nearer ones: {', '.join(other)})" if other else "") + f", against a chance of {chance} (one in "
            f"{len(COLOURS)} colours). {verdict}"
            + ("\n\n" + measured.strip() if (measured := measured_note(record)) else ""))   # two blocks, not one


def sidebar_weights(weights: str, name: str | None = None) -> str:
    """The weights chosen in the sidebar, named for a reader: a shipped set by its title (`name`, e.g. "Recall
    checkpoint, plain training"), the text model for the shipped "trained" choice, else a chosen checkpoint."""
    name = name or ("Text model" if weights == "trained" else None)
    which = f"the {name[:1].lower() + name[1:]}" if name else "a chosen checkpoint"
    return f"The sidebar's weights ({which})"


def weights_line(weights: str, record: dict | None, name: str | None = None) -> str:
    """The one sentence a page says about the loaded weights on far facts, before its own measurement; the full
    statement (`weights_note`) is said once, on the glossary page, which the sentence links to. It names the
    sidebar's weights (`sidebar_weights`, `name` the shipped set's title): under a side-by-side of the shipped
    sets, "these weights" would not say which."""
    if weights == "random":
        return "Random weights: every far-fact answer here is a guess, so the view shows machinery, not behaviour."
    who = sidebar_weights(weights, name)
    said = _far_part(record)
    if said is None:
        return f"{who} came without a record of their far recall."
    far = said["recall_far"]
    verdict = "no better than a guess" if no_better_than_guess(far) else "clearly above a guess"
    return (f"{who} recall {100 * far:.0f}% of held-out far facts, against a chance of {100 * CHANCE:.1f}%: "
            f"{verdict}.")


def _no_recall(said: dict) -> str:
    """The verdict on weights whose far recall is no better than a guess: when nearer facts are no better either,
    recall has not emerged at any distance, so the misses say nothing about distance or the design."""
    near = [said[f"recall_{b}"] for b in ("inside", "just_past") if isinstance(said.get(f"recall_{b}"), (int, float))]
    if near and all(no_better_than_guess(x) for x in near):
        return ("That is no better than a guess, and neither are the nearer facts: recall has not emerged at any "
                "distance, so these weights have not learned the task, and where they miss says nothing about the "
                "distance or the design")
    return "That is no better than a guess: far recall has not emerged in these weights"


def measured_note(record: dict | None) -> str:
    """The figures `lab.probes.quality --record` measured on these weights (their training.json "measured"): far
    recall with the global branch off, how often the far fact's entry is in the candidate pool at the answer
    row, far recall on the held-out templates, and how often a story with other facts is answered with one of
    theirs (finding a fact but not the asked one). Empty when they were not measured."""
    m = (record or {}).get("measured") or {}
    parts = []
    if "recall_far" in m and "recall_far_window_only" in m:
        parts.append(f"far recall {100 * m['recall_far']:.0f}% with everything on and "
                     f"{100 * m['recall_far_window_only']:.0f}% with nothing older than the window read directly")
    if "fact_in_pool" in m:
        parts.append(f"the fact's entry in the candidate pool at the answer row for {100 * m['fact_in_pool']:.0f}% "
                     "of far stories")
    if "recall_far_heldout_templates" in m:
        parts.append(f"{100 * m['recall_far_heldout_templates']:.0f}% on far stories told with names, objects and "
                     "sentences never trained on")
    if "distractors_other_fact" in m and "distractors_random_fact" in m:
        parts.append(f"where a story holds other facts, {100 * m.get('distractors_right', 0):.0f}% of the answers "
                     f"are the asked fact's colour and {100 * m['distractors_other_fact']:.0f}% another fact's "
                     f"(a pick at random among the story's facts would be right "
                     f"{100 * m['distractors_random_fact']:.0f}% of the time)")
    return (f" Measured on these weights ({m.get('date', 'no date')}): " + "; ".join(parts) + ".") if parts else ""


def _far_part(record: dict | None) -> dict | None:
    """The part of a training record that states held-out far recall: "measured" (`lab.probes.quality --record`, more
    stories, on the file as shipped) when it does, else "final" (the run's last quick evaluation); None if neither."""
    rec = record or {}
    for part in (rec.get("measured") or {}, rec.get("final") or {}):
        if isinstance(part.get("recall_far"), (int, float)):
            return part
    return None


def far_recall_of(record: dict | None) -> float | None:
    """Held-out far recall of a training record, from the part `_far_part` picks."""
    part = _far_part(record)
    return None if part is None else float(part["recall_far"])


def near_recall_of(record: dict | None) -> list[float]:
    """Held-out recall of the nearer facts (the "inside" and "just_past" buckets) in the part `_far_part` picks."""
    part = _far_part(record) or {}
    return [float(part[f"recall_{b}"]) for b in ("inside", "just_past")
            if isinstance(part.get(f"recall_{b}"), (int, float))]


@dataclass(frozen=True)
class ShippedFacts:
    """What the offer says about one shipped set: its kind ("text", "unaided", "recall"), title, training record
    and window."""

    kind: str
    title: str
    record: dict | None
    window: int | None


def _pct(x: float | None) -> str:
    return "not measured" if x is None else f"{100 * x:.0f}% of far held-out facts"


def set_line(facts: ShippedFacts) -> str:
    """What one shipped set is and learned, with its far recall from its record and, for a recall checkpoint, how
    it was trained (lessons.how_trained, read from the same record)."""
    far = far_recall_of(facts.record)
    if facts.kind == "text":
        near = near_recall_of(facts.record)
        guess = far is not None and no_better_than_guess(far)
        if guess and near and all(no_better_than_guess(x) for x in near):
            verdict = ("recall has not emerged in it at any distance (" + _pct(far) + "; nearer ones: "
                       + ", ".join(f"{100 * x:.0f}%" for x in near) + "), so its misses say nothing about distance")
        else:
            verdict = ("far recall has not emerged in it" if guess else "its far recall") + f" ({_pct(far)})"
        return f"{facts.title}: English from a small corpus with the configuration's window; {verdict}."
    share = text_share(facts.record)
    text = "" if share is None else f", {100 * share:.0f}% ordinary text in its last phase"
    return (f"{facts.title}: the same tokenizer and layer map (no vision tower), every window narrowed to "
            f"{facts.window} tokens, trained mostly on drills (stories with several facts, then a question about "
            f"each) and copies{text}, so a far fact can come back only through the compressed entries the indexer "
            f"selects ({_pct(far)}). {training_clause(facts.record, 'far', short=True)}")


def checkpoints_offer(now: str | None, sets: Sequence[ShippedFacts]) -> list[str]:
    """One line per shipped set (`set_line`), the loaded one (`now`, a kind or None) first: what the panel says
    before it offers to load another set."""
    return [set_line(f) for f in sorted(sets, key=lambda f: f.kind != now)]
