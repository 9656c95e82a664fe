"""How a set of trained weights was trained, read from its own training record (training.json), and the clause a
page says beside any picture of what those weights do.

The point of the clause: a loss can point a model's attention, its index scores or its readout straight at the
answer's source (the lab's lookup loss, selection loss, entry probe and readout forcing, lab/README.md §4). A
picture of attention on the fact, from weights trained that way, shows that the road can carry a far fact; it is
not evidence that training finds the road unaided. Weights trained without those losses (the answers weighted,
and the pool-KL loss that trains the indexer to follow the main attention, as DeepSeek-V3.2 trains its lightning
indexer) found the road themselves.

A record describes its last phase (`train_config`, the curriculum's stages) and may carry earlier phases
(`lineage`: their records; `phases`: their commands). Every phase is read, and a loss counts when any phase gave
it a weight above zero; an option a record does not name (runs from before the option existed) counts as unused.
Pure: plain dicts in, text out; it knows neither which files hold the records nor Streamlit.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache

# the losses aimed at the answer's source, in the order a sentence names them: (record field, what it trains)
AIMED = (
    ("lookup_weight", "a lookup loss on its attention"),
    ("select_weight", "a selection loss on its index scores"),
    ("entry_weight", "an entry probe on its compressed entries"),
    ("readout_forcing", "readout forcing on what its layers read out"),
)
SHORT = {"lookup_weight": "lookup", "select_weight": "selection", "entry_weight": "entry probe",
         "readout_forcing": "readout forcing"}
FLAGS = ("lookup_every_head", "lookup_inside", "pool_kl")       # switches, read as on or off
POOL_KL = ("a pool-KL loss that trains the indexer to follow the main attention (DeepSeek-V3.2's way of "
           "training its indexer)")


@dataclass(frozen=True)
class Guidance:
    """What a training record says about the losses its weights were trained with."""

    aimed: dict[str, float]      # record field -> its largest weight over the phases (only those above zero)
    every_head: bool             # the lookup loss asked every head, not some head
    inside: bool                 # the lookup loss also asked sources inside the window
    pool_kl: bool
    answer_weight: float         # the answers' weight in the loss (1: not weighted)
    phases: int                  # phases the record describes
    aimed_phases: int = 0        # of them, those with an aimed loss (the last phase among them when it has one)

    @property
    def guided(self) -> bool:
        """Whether any loss pointed attention, index scores, entries or readout at the answer's source."""
        return bool(self.aimed)

    def when(self) -> str:
        """Where the aimed losses sit among the record's phases: "its last phase", "3 of its 6 phases" or
        "its training" (a record of one phase)."""
        if self.phases <= 1 or self.aimed_phases >= self.phases:
            return "its training"
        return "its last phase" if self.aimed_phases == 1 else f"{self.aimed_phases} of its {self.phases} phases"

    def names(self) -> list[str]:
        """The aimed losses, in words, in AIMED's order (the lookup loss says when it asked every head)."""
        out = []
        for field, words in AIMED:
            if field in self.aimed:
                if field == "lookup_weight" and self.every_head:
                    words = "a lookup loss on every head's attention"
                out.append(words)
        return out


def _number(v) -> float:
    if isinstance(v, bool):
        return 1.0 if v else 0.0
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        if v.lower() in ("true", "yes"):
            return 1.0
        try:
            return float(v)
        except ValueError:
            return 0.0
    return 0.0


_FLAG = re.compile(r"--([a-z][a-z0-9-]*)(?:[ =]([^\s-][^\s;]*|-\d[^\s;]*))?")
_PAIR = re.compile(r"(?<![-\w])([a-z_][a-z0-9_]*)=([^\s;]+)")
_WATCHED = tuple(f for f, _ in AIMED) + FLAGS + ("answer_weight",)


@lru_cache(maxsize=256)
def _from_command(cmd: str) -> tuple[tuple[str, float], ...]:
    """(field, value) for every watched option a training command sets, as `--lookup-weight 1` or as a curriculum
    stage's `lookup_weight=1` (a switch given bare, `--pool-kl`, reads as 1). Read once per command: a page reads
    the same records' commands on every run."""
    out = []
    for m in _FLAG.finditer(cmd):
        field = m.group(1).replace("-", "_")
        if field in _WATCHED:
            out.append((field, _number(m.group(2)) if m.group(2) is not None else 1.0))
    for m in _PAIR.finditer(cmd):
        if m.group(1) in _WATCHED:
            out.append((m.group(1), _number(m.group(2))))
    return tuple(out)


def _phase_values(rec: dict) -> Iterator[tuple[str, float]]:
    """Every watched setting one phase's record gives: its config, each curriculum stage, its command."""
    tc = rec.get("train_config") if isinstance(rec.get("train_config"), dict) else {}
    for field in _WATCHED:
        if field in tc:
            yield field, _number(tc[field])
    cur = rec.get("curriculum") if isinstance(rec.get("curriculum"), dict) else {}
    for stage in cur.get("passed") or []:
        settings = stage.get("settings") if isinstance(stage, dict) else None
        for field, v in (settings or {}).items():
            if field in _WATCHED:
                yield field, _number(v)
    if isinstance(cur.get("spec"), str):
        yield from _from_command(cur["spec"])
    if isinstance(rec.get("command"), str):
        yield from _from_command(rec["command"])


def _phases(record: dict) -> Iterable[dict]:
    """The record's phases, each once: its own, its lineage's records, then phases kept only as their commands
    (`phases` lists the runs again, the last one included: a command already read is the same phase)."""
    seen: set[str] = set()
    listed = [record] + [e for e in record.get("lineage") or [] if isinstance(e, dict)]
    listed += [{"command": p["command"]} for p in record.get("phases") or []
               if isinstance(p, dict) and isinstance(p.get("command"), str)]
    for phase in listed:
        cmd = phase.get("command")
        if isinstance(cmd, str):
            if cmd in seen:
                continue
            seen.add(cmd)
        yield phase


def read_guidance(record: dict | None) -> Guidance | None:
    """The losses a training record says its weights were trained with; None without a record."""
    if not isinstance(record, dict):
        return None
    top: dict[str, float] = {}
    count = aimed_phases = 0
    for phase in _phases(record):
        count += 1
        values = list(_phase_values(phase))
        aimed_phases += any(v > 0 for f, v in values if f in SHORT)
        for field, v in values:
            top[field] = max(top.get(field, 0.0), v)
    return Guidance(aimed={f: top[f] for f, _ in AIMED if top.get(f, 0.0) > 0},
                    every_head=top.get("lookup_every_head", 0.0) > 0 and top.get("lookup_weight", 0.0) > 0,
                    inside=top.get("lookup_inside", 0.0) > 0 and top.get("lookup_weight", 0.0) > 0,
                    pool_kl=top.get("pool_kl", 0.0) > 0, answer_weight=max(1.0, top.get("answer_weight", 1.0)),
                    phases=count, aimed_phases=aimed_phases)


def _join(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def training_clause(record: dict | None, about: str = "far", short: bool = False) -> str:
    """The clause a page says beside a picture of what these weights do: which losses pointed them at the answer's
    source, read from their record, and what that means for the picture. `about` is "far" (a far fact through
    the compressed entries) or "copy" (a span said again, the look-back heads); `short` gives the one-line form
    for a caption under a column title. Plain text."""
    g = read_guidance(record)
    if g is None:
        return "These weights came without a training record, so how they were trained is not known."
    if short:
        if not g.guided:
            return ("Trained with no loss on attention, index scores or readout"
                    + (" (the pool-KL indexer loss only)" if g.pool_kl else "") + ": it found this road itself.")
        aim = "the fact's entry" if about == "far" else "the earlier copy"
        losses = ", ".join(SHORT[f] for f, _ in AIMED if f in g.aimed)
        return (f"Trained with losses aimed at {aim} in {g.when()} ({losses}): "
                + ("it shows the road can carry a fact, not that training finds it unaided." if about == "far" else
                   "its look-back heads were trained toward, not found by language training alone."))
    extras = []
    if g.answer_weight > 1:
        extras.append(f"the answers weighted x{g.answer_weight:g}")
    if g.pool_kl:
        extras.append(POOL_KL)
    plain = ("; besides the next-token loss it had " + _join(extras)) if extras else ""
    if not g.guided:
        return (f"How it was trained: no loss on its attention, index scores or readout{plain}. What it does here, "
                "training found on its own.")
    where = "the fact's entry" if about == "far" else "the earlier copy"
    inside = " (inside the window too)" if g.inside else ""
    shows = ("So the picture shows that the road can carry a far fact, not that training finds that road unaided."
             if about == "far" else "So its look-back heads show what training aimed at them produced, not what "
             "plain language training finds.")
    return (f"How it was trained: in {g.when()}, {_join(g.names())} pointed it at {where}{inside}"
            + (f", and it had {_join(extras)}" if extras else "") + f". {shows}")


MIXED = ("drill_frac", "copy_frac", "kv_frac", "repeat_frac")     # the shares of a batch that are not plain text


def text_share(record: dict | None) -> float | None:
    """The share of plain text in the batches of the record's last phase (its last curriculum stage when it has
    stages): one minus the drills', copies', key-value rows' and repeated spans' shares. None without a record."""
    if not isinstance(record, dict):
        return None
    settings = dict(record.get("train_config") or {})
    stages = ((record.get("curriculum") or {}).get("passed") or []) if isinstance(record.get("curriculum"), dict) \
        else []
    if stages and isinstance(stages[-1], dict):
        settings.update(stages[-1].get("settings") or {})
    return max(0.0, 1.0 - sum(_number(settings.get(f, 0.0)) for f in MIXED))


def clause(record: dict | None) -> str:
    """How a recall checkpoint was trained, in the fewest words that keep the point, read from its record: the
    losses aimed at the fact's entry and what the picture then shows, or that there were none."""
    g = read_guidance(record)
    if g is None:
        return "How it was trained is not recorded."
    if not g.guided:
        return "No loss aimed at attention or index scores."
    losses = ", ".join(SHORT[f] for f, _ in AIMED if f in g.aimed)
    return f"Losses aimed at that entry ({losses}): the road can carry a fact, not evidence training finds it."
