"""Training: the tiny language model, its look-back practice, the DSpark drafter, the vision tower.

schedule (TrainConfig, staged settings, curriculum rungs), batches (text, drills, copies, repeats),
step (the model, optimizer and one step), state (checkpoints to resume), run (a run from start to
finish), evaluation (held-out loss, recall, copy during training; the gates of a curriculum stage),
lookback (answer-only tasks, the weighted loss), lookup (the lookup, selection, readout-forcing and
pool-KL losses as recorders of the model's forward), drafter (the DSpark drafter's training, arch/drafter.py's
trainer), vision_tower (the tower's), binding_probe (a read-out of the object from a fact's entry). Uses
model/ (the architecture, checkpoints, the held-out sets of model/heldout.py) and lab/corpus; the command
lines are lab/cli/.

This file is the package's face: callers outside lab/training import these names from `lab.training`. The
drafter's and the vision tower's own steps, schedules and evaluations are run by `python -m lab dspark
train` and `python -m lab train-vision`; the face holds their configs and evaluations (`evaluate_drafter`,
`evaluate_vision`), so `train_step` and `lr_at` here are the language model's.
"""

from .batches import (
    CopyIds,
    Rows,
    copy_ids_for,
    copy_rows,
    drill_rows,
    kv_rows,
    make_batch,
    patchwork_span,
    repeat_rows,
)
from .binding_probe import entry_reads, probe_accuracy
from .drafter import DraftTrainConfig, evaluate_drafter, train_drafter, write_drafter
from .evaluation import (
    EVAL_KEYS,
    copy_accuracy,
    copy_probe,
    fact_in_pool,
    frequent_ids,
    kv_lookup,
    kv_probe,
    quick_eval,
    said_twice,
)
from .lookback import answer_weighted_ce, induction_mask, lookup_rows, recall_rows
from .lookup import LookupRecorder, LookupTarget, PoolKLRecorder, PoolTarget, Recorders, lookup_target
from .run import Run, finish, start_run, train_steps, training_record
from .schedule import (
    STAGE_FIELDS,
    Stage,
    TrainConfig,
    batch_generator,
    copy_gap_at,
    lr_at,
    parse_curriculum,
    staged,
    window_at,
)
from .state import init_from, load_state, model_state, read_meta, save_state, save_weights_bf16, write_json_entry
from .step import (
    EntryProbe,
    build_model,
    forward_backward,
    freeze_except,
    lm_loss,
    make_optimizer,
    set_window,
    train_step,
)
from .vision_tower import VisionTrainConfig, evaluate_vision

__all__ = [
    # a run: settings, curriculum, start, steps, finish
    "TrainConfig", "Stage", "STAGE_FIELDS", "parse_curriculum", "staged", "window_at", "copy_gap_at", "lr_at",
    "Run", "start_run", "train_steps", "finish", "training_record",
    # the model, the optimizer and one step
    "build_model", "make_optimizer", "train_step", "forward_backward", "lm_loss", "set_window", "freeze_except",
    "EntryProbe",
    # the rows of a batch
    "batch_generator", "make_batch", "drill_rows", "kv_rows", "repeat_rows", "patchwork_span", "copy_rows",
    "copy_ids_for",
    "CopyIds", "Rows",
    # checkpoints to resume from and the training record
    "save_state", "load_state", "model_state", "read_meta", "init_from", "save_weights_bf16", "write_json_entry",
    # evaluation during training and the gates of a curriculum stage (the app's is model/heldout.py)
    "quick_eval", "EVAL_KEYS", "copy_accuracy", "said_twice", "copy_probe", "fact_in_pool", "kv_lookup", "kv_probe",
    "frequent_ids", "entry_reads", "probe_accuracy",
    # look-back practice, and this project's own losses through the model's recorder hooks
    "recall_rows", "lookup_rows", "induction_mask", "answer_weighted_ce",
    "lookup_target", "LookupTarget", "LookupRecorder", "PoolTarget", "PoolKLRecorder", "Recorders",
    # the DSpark drafter and the vision tower
    "DraftTrainConfig", "train_drafter", "evaluate_drafter", "write_drafter", "VisionTrainConfig",
    "evaluate_vision",
]
