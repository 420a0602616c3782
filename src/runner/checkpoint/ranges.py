"""What a checkpoint's counters and values may be, beyond their type (``files.KINDS``): a step counter of
-5 would resume at step -5 and name a checkpoint ``step_-0000002.pt`` that pruning never removes; a best
value of NaN would block every later best (nothing compares better than NaN). Checked as the file is
read, with the types, so a forged or damaged file is one line naming the key."""

import math
import re
from collections.abc import Mapping
from typing import Any

LIMIT = 2**63  # what a step counter, torch's int64, holds
COUNTS = ("global_step", "epoch", "batches_done_in_epoch", "skipped_steps")
SEEDS = 2**32  # the seed setting's range
MOST_PROCESSES = 2**24


def shown(value: Any) -> Any:
    """A forged integer may have thousands of digits: the line names it without them."""
    return "a huge integer" if isinstance(value, int) and abs(value) >= 10**12 else value


def one_line(text: str) -> str:
    shown = repr(text)
    return shown if len(shown) <= 80 else shown[:80] + "..."


def out_of_range(checkpoint: Mapping[str, Any]) -> list[str]:
    """``key (value: what it may be)`` for each value outside what runner saves there; the types are
    already checked."""
    wrong = [
        f"{key} ({shown(checkpoint[key])}: a count, >= 0)"
        for key in COUNTS
        if not 0 <= checkpoint[key] < LIMIT
    ]
    step, best_step = checkpoint["global_step"], checkpoint["best_val_step"]
    if best_step is not None and not 0 <= best_step <= max(step, 0):
        wrong.append(f"best_val_step ({shown(best_step)}: a step in [0, global_step])")
    best = checkpoint["best_val"]
    if best is not None and not math.isfinite(best):
        wrong.append(f"best_val ({best}: a finite number or None)")
    if not 0 <= checkpoint["seed"] < SEEDS:
        wrong.append(f"seed ({shown(checkpoint['seed'])}: in [0, 2**32))")
    digest = checkpoint.get("frozen_weights_sha256")
    if digest is not None and not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        wrong.append(f"frozen_weights_sha256 ({one_line(digest)}: sha256:<64 hex digits>)")
    if not 1 <= checkpoint["world_size"] <= MOST_PROCESSES:
        wrong.append(f"world_size ({shown(checkpoint['world_size'])}: a number of processes, >= 1)")
    return wrong
