"""The settings of a language-model training run (`TrainConfig`) and the schedules read from them per
step: learning rate (warm-up then cosine), the staged training window and copy gap, the batch seed.

Follows docs/design/equations.md §13 (dense warm-up of the indexer, then sparse training) and the look-back
curriculum of lab/README.md §3: step-staged windows and gaps (`window_stages`, `copy_gap_stages`), and gated
stages (`curriculum`, `Stage`: each rung held until its copy probe passes `gate`; lab/training/run.py).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

import torch


@dataclass
class TrainConfig:
    preset: str = "tiny"
    steps: int = 480
    batch: int = 16
    seq_len: int = 512
    lr: float = 3e-3
    min_lr_frac: float = 0.1
    warmup_steps: int = 30
    dense_warmup_frac: float = 0.08     # share of steps with dense compressed attention (indexer warm-up)
    indexer_weight: float = 1.0
    bias_gamma: float = 1e-3
    weight_decay: float = 0.1
    clip: float = 1.0
    seed: int = 0
    threads: int = 0                    # 0 = all cores
    ckpt_every: int = 40
    eval_every: int = 120               # quick evaluation every this many steps and at the end (0: never)
    drafter_steps: int = 300
    stream: str = ".cache/corpus/tokens_train.npy"
    tokenizer: str = "data/weights/tiny/tokenizer.json"
    drill_frac: float = 0.0             # share of each batch made of dense recall drills (lab/corpus/stories.py)
    drill_cast: str = "train"           # their names, objects and sentences: "train" (the stories' own) or "wide"
    drill_fillers: int = 4              # up to this many filler sentences after each fact (more: facts further back)
    drill_link: int = -1                # >=0: binding drills, 0..N link words between object and colour
    drill_link_share: float = 0.5       # the share of facts and answers said that way (lab/corpus/stories.py)
    repeat_frac: float = 0.0            # share made of repeated text spans (pure copy-from-far-back practice)
    repeat_pieces: int = 0              # >0: repeated spans stitched from pieces of 1..N tokens (not memorisable)
    copy_frac: float = 0.0              # share made of shuffled frequent-token spans said twice (induction practice)
    copy_span: int = 5                  # those spans are 3..copy_span tokens long
    copy_gap: int = 0                   # with 0..copy_gap other shuffled tokens between the two copies
    copy_vocab: int = 300               # drawn from this many most frequent tokens of the stream
    copy_temper: float = 0.0            # >0: drawn instead from the unigram^temper over the whole vocabulary
    copy_spread: bool = False           # gaps spread over the whole row (0 .. seq_len - 2 x span)
    kv_frac: float = 0.0                # share made of key-value lookups (associative recall; ids as the copies')
    kv_pairs: int = 8                   # 2..kv_pairs pairs per lookup
    kv_gap: int = 32                    # 0..kv_gap other tokens between the pairs and the queries
    kv_vocab: str = "frequent"          # "frequent": keys and values as the copies' ids; "story": keys are the
                                        # drills' one-token objects, values the colours (binding drilled densely);
                                        # "question": story, each key said once more just before its query
    kv_pad: int = 0                     # 0..kv_pad filler tokens before and after every pair and query
    kv_link: int = 0                    # 0..kv_link filler tokens between a key and its value
    train_window: int = 0               # sliding window while training (0 = the config's); a curriculum knob
    config_window: int = 0              # >0: the model's config gets this sliding_window (what the checkpoint
                                        # ships with; weights trained at a narrowed window need it to be read right)
    window_stages: str = ""             # "step:window,..." e.g. "0:8,300:16,600:0" (overrides train_window)
    copy_gap_stages: str = ""           # "step:gap,...": the far copies' largest gap grows in stages
                                        # (overrides copy_gap)
    copy_near_frac: float = 0.0         # share of copy spans said again at once (gap 0-2) whatever the far gap
    answer_weight: float = 1.0          # loss weight of look-back targets (drill answers, second copies)
    init_from: str = ""                 # start from these weights (a checkpoint dir of a previous phase)
    stop_at: int = 0                    # stop after this step (0 = steps) keeping the schedule of `steps`
    max_minutes: float = 0.0            # >0: stop after the step that passes this many minutes of training (a
                                        # time-boxed run on a GPU), evaluated and saved like a last step
    fast: bool = False                  # compiled kernels, same maths (model/fusion.py); the command line turns it on
    curriculum: str = ""                # gated stages: "field=value field=value; ..." (Curriculum below)
    start_stage: int = 0                # resume the curriculum at this stage (with --init-from its weights)
    gate: float = 0.6                   # a stage ends when its copy probe reaches this accuracy ...
    gate_every: int = 50                # ... measured every this many steps ...
    gate_min_steps: int = 50            # ... once the stage has run this many steps (a stage may set its own: a
                                        # long one, e.g. language with the copies kept, is then a fixed length)
    stage_dir: str = ""                 # where each passed stage's weights go (bf16), e.g. runs/checkpoints/s1
    pool_kl: bool = False               # the candidate source's indexer learns the summed attention of every layer
                                        # its pool serves (dense phases), not its own layer's only
    train_only: str = ""                # regex: train only the parameters whose name matches (the rest frozen)
    lookup_weight: float = 0.0          # >0: the lookup loss (each answer row's ratio-1 attention on the entry
                                        # of the token it repeats: a drill's fact colour, a pair's value, a first
                                        # copy) with this weight (lab/training/step.py)
    lookup_inside: bool = False         # the lookup loss also asks the rows whose source lies inside the window,
                                        # there through every layer's window share on it (an induction head)
    lookup_every_head: bool = False     # the lookup loss asks every ratio-1 head for the source, not some head:
                                        # a copy is read from the heads' mixture, so one head of 24 is not enough
    readout_forcing: float = 0.0        # >0: at the lookup loss's rows, the output of every layer reading ratio-1
                                        # entries is mixed this much with its source entry's value, as if the
                                        # heads had found it: the read-out learns to name what an entry holds
                                        # while the attention is still learning where it is (training only)
    readout_forcing_rows: float = 1.0   # the share of the lookup rows the forcing is drawn for (each row afresh
                                        # every step); the others' answers still need the heads to find the source
    entry_weight: float = 0.0           # >0: the entry probe (a linear read-out, trained with the model, of the
                                        # object said just before each fact's colour, from that colour's decoder
                                        # entry) with this weight (lab/training/step.py)
    select_weight: float = 0.0          # >0: the selection loss (each answer row's index scores in the layers that
                                        # select ratio-1 entries put its source's entry first) with this weight


def staged(spec: str, step: int, default: int) -> int:
    """The value of a "step:value,step:value" schedule at `step` (the last stage started); `default`
    before the first stage or when `spec` is empty."""
    value = default
    for part in filter(None, (p.strip() for p in spec.split(","))):
        at, _, v = part.partition(":")
        if not (at.strip().isdigit() and v.strip().lstrip("-").isdigit()):
            raise ValueError(f"bad stage {part!r} in {spec!r}: write step:value, e.g. 0:8,300:16")
        if step >= int(at):
            value = int(v)
    return value


def window_at(tc: TrainConfig, step: int) -> int:
    return staged(tc.window_stages, step, tc.train_window)


def copy_gap_at(tc: TrainConfig, step: int) -> int:
    return staged(tc.copy_gap_stages, step, tc.copy_gap)


def lr_at(tc: TrainConfig, step: int) -> float:
    if step < tc.warmup_steps:
        return tc.lr * (step + 1) / tc.warmup_steps
    t = (step - tc.warmup_steps) / max(1, tc.steps - tc.warmup_steps)
    return tc.lr * (tc.min_lr_frac + (1 - tc.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * min(1.0, t))))


def batch_generator(tc: TrainConfig, step: int) -> torch.Generator:
    return torch.Generator().manual_seed(tc.seed * 1_000_003 + step)


# Fields a curriculum stage may set: the data, the rows and the window; not the optimizer or the run.
STAGE_FIELDS = ("seq_len", "batch", "train_window", "copy_frac", "copy_span", "copy_gap", "copy_vocab",
                "copy_temper", "copy_spread", "copy_near_frac", "drill_frac", "drill_cast", "drill_fillers",
                "drill_link", "drill_link_share", "repeat_frac", "repeat_pieces", "answer_weight",
                "dense_warmup_frac", "lr", "gate", "gate_min_steps", "pool_kl", "kv_frac", "kv_pairs", "kv_gap",
                "kv_vocab", "kv_pad", "kv_link", "lookup_weight", "lookup_inside", "lookup_every_head",
                "readout_forcing", "readout_forcing_rows", "entry_weight", "select_weight")


@dataclass
class Stage:
    """One rung of a curriculum: the settings it changes, and the copy probe that gates leaving it."""

    settings: dict

    def apply(self, tc: TrainConfig) -> TrainConfig:
        return replace(tc, **self.settings)


def parse_curriculum(spec: str) -> list[Stage]:
    """"seq_len=32 train_window=2 copy_gap=2; seq_len=32 copy_spread=1" -> stages, each a set of
    TrainConfig fields (STAGE_FIELDS) typed like the field's default. A later stage starts from the run's
    settings, not from the previous stage: every stage says all it changes."""
    defaults = asdict(TrainConfig())
    stages = []
    for part in filter(None, (p.strip() for p in spec.split(";"))):
        settings: dict = {}
        for item in part.split():
            name, eq, value = item.partition("=")
            if not eq or name not in STAGE_FIELDS:
                raise ValueError(f"bad stage setting {item!r}: write field=value with a field among {STAGE_FIELDS}")
            kind = type(defaults[name])
            try:
                settings[name] = bool(int(value)) if kind is bool else kind(value)
            except ValueError:
                raise ValueError(f"bad value in {item!r}: {name} takes a {kind.__name__}") from None
        stages.append(Stage(settings))
    return stages
