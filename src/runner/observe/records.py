"""What a run leaves beside its events for people and summaries: ``run.yaml`` (the config and what
the run resolved), ``data_split.json`` and ``result.json`` (kept apart from report.py, whose
TensorBoard reader is slow to import, so training does not pay for it). Each is written atomically:
a full disk leaves the old file or none, never an empty one."""

import json
from pathlib import Path
from typing import Any

import yaml

from runner.checkpoint.durable import write_text, writing
from runner.config.bounded_read import read_bounded

RESULT_FILE = "result.json"
# How fast the run goes and the memory it holds: TensorBoard lists its tag groups by name, so these sort
# after ``train/`` and ``val/``, the curves a person opens the Scalars tab for.
SAMPLES_PER_SEC = "vitals/samples_per_sec"
MAX_MEMORY_ALLOCATED = "vitals/max_memory_allocated_gib"
# Their names in the event files of runs written before (read as the names above).
FORMER_TAGS = {"perf/samples_per_sec": SAMPLES_PER_SEC, "perf/max_memory_allocated_gib": MAX_MEMORY_ALLOCATED}
# libyaml's writer where PyYAML has it (its wheels do): every run writes run.yaml as it starts, and
# PyYAML's own writer takes seven times the Python calls for the same text (a key libyaml finds too
# long or odd to write plain it writes as ``? key``; either reads back as the same data). libyaml
# refuses a lone surrogate (a non-UTF-8 byte of a path, as Python decodes it), which PyYAML's writes.
SAFE_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def current_tag(tag: str) -> str:
    """A tag read from an event file, by today's name (``perf/samples_per_sec`` of an older run is
    ``vitals/samples_per_sec``)."""
    return FORMER_TAGS.get(tag, tag)


def best_tag(monitor: str) -> str:
    """``val/loss`` -> ``val/loss_best``: the scalar of the monitored metric's best value so far, which
    the engine logs and the summaries leave out of their final values."""
    return f"{monitor}_best"


def write_run_record(run_dir: Path, config: dict[str, Any], runtime: dict[str, Any]) -> None:
    record = {**config, "runtime": runtime}
    try:
        text = yaml.dump(record, Dumper=SAFE_DUMPER, sort_keys=False)
    except UnicodeEncodeError:
        text = yaml.dump(record, Dumper=yaml.SafeDumper, sort_keys=False)
    write_text(run_dir / "run.yaml", text)


def record_split(run_dir: Path, train_set: Any, val_set: Any, test_set: Any = None) -> None:
    """Keep the data split with the run, so the run can be repeated on the same data. A stream has no
    size (``null``)."""
    named = [("train", train_set), ("val", val_set), *([("test", test_set)] if test_set is not None else [])]
    split = {f"{name}_size": len(dataset) if hasattr(dataset, "__len__") else None for name, dataset in named}
    for name, dataset in named:
        if hasattr(dataset, "indices"):
            split[f"{name}_indices"] = [int(index) for index in dataset.indices]
    write_text(run_dir / "data_split.json", json.dumps(split))


def recorded_result(run_dir: Path) -> dict[str, Any]:
    """A run's ``result.json`` as written by ``write_result``; empty where there is none (or a damaged
    one): the run has no recorded outcome."""
    path = run_dir / RESULT_FILE
    try:  # a FIFO or a device there would block the read, or never end it; bounded in size
        result = json.loads(read_bounded(path))
    except (OSError, ValueError, RecursionError):  # nested thousands deep: not one write_result wrote
        return {}
    return result if isinstance(result, dict) else {}


def write_result(
    run_dir: Path,
    status: str,
    wall_seconds: float,
    best: float | None = None,
    error: str = "",
    **details: Any,
) -> None:
    """``ok``, ``pruned`` (a search stopped it early: ``pruned_at_step``) or ``failed``; a run without
    one is ``incomplete`` (still running, or killed). A search's job adds its ``objectives``. A refused
    write (a full disk) is a ``WriteError``."""
    with writing(run_dir):
        run_dir.mkdir(parents=True, exist_ok=True)
    result = {
        "status": status,
        "wall_seconds": round(wall_seconds, 3),
        "best": best,
        "error": error,
        **details,
    }
    write_text(run_dir / RESULT_FILE, json.dumps(result, indent=2))
