"""Summaries of runs and sweeps, rebuilt from what each run left on disk: TensorBoard events,
``.hydra/overrides.yaml``, ``run.yaml`` and ``result.json``. Works on interrupted sweeps too."""

import csv
import json
import logging
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from runner.observe.records import RESULT_FILE

logging.getLogger("tensorboard").setLevel(logging.WARNING)  # its event reader chats at INFO


@dataclass
class RunSummary:
    name: str
    overrides: str
    status: str
    best: float | None
    best_step: int | None
    final_train_loss: float | None
    steps: int
    wall_seconds: float | None
    curve: list[tuple[int, float]] = field(default_factory=list)  # the monitored metric per step


def has_events(directory: Path) -> bool:
    return any(directory.glob("events.out.tfevents.*"))


def find_runs(directory: Path) -> list[Path]:
    """A single run directory, or the job directories of a sweep (numbered ones in order)."""
    if has_events(directory) or (directory / RESULT_FILE).exists():
        return [directory]
    jobs = [path for path in directory.iterdir() if path.is_dir() and (path / ".hydra").is_dir()]
    return sorted(
        jobs,
        key=lambda path: (not path.name.isdigit(), int(path.name) if path.name.isdigit() else 0, path.name),
    )


def read_yaml(path: Path, kind: type) -> Any:
    """A run's YAML record, or None where it is missing or damaged (then the summary does without it,
    with a warning)."""
    if not path.exists():
        return None
    try:
        content = yaml.safe_load(path.read_text())
    except (OSError, ValueError, yaml.YAMLError) as error:
        print(f"runner: warning: skipping {path}: {str(error).splitlines()[0]}", file=sys.stderr)
        return None
    if content is not None and not isinstance(content, kind):
        print(f"runner: warning: skipping {path}: it holds a {type(content).__name__}", file=sys.stderr)
        return None
    return content


def overrides_of(run_dir: Path) -> list[str]:
    overrides = read_yaml(run_dir / ".hydra" / "overrides.yaml", list) or []
    return [str(override) for override in overrides]


def common_overrides(run_dirs: list[Path]) -> list[str]:
    """Overrides every job shares; the table shows each job's others (what the sweep varies)."""
    if len(run_dirs) < 2:
        return []
    shared = set(overrides_of(run_dirs[0]))
    for run_dir in run_dirs[1:]:
        shared &= set(overrides_of(run_dir))
    return [override for override in overrides_of(run_dirs[0]) if override in shared]


def monitor_of(run_dir: Path) -> tuple[str, str]:
    checkpoint = (read_yaml(run_dir / "run.yaml", dict) or {}).get("checkpoint")
    if not isinstance(checkpoint, dict):
        return "val/loss", "min"
    return str(checkpoint.get("monitor", "val/loss")), str(checkpoint.get("mode", "min"))


def read_result(path: Path) -> dict[str, Any]:
    """A run's ``result.json``. A damaged one (a full disk once left 0 bytes) is skipped with a
    warning, and the run is summarised from its events."""
    if not path.exists():
        return {}
    try:
        result = json.loads(path.read_text())
        if not isinstance(result, dict):
            raise ValueError(f"it holds a JSON {type(result).__name__}, not an object")
    except (OSError, ValueError) as error:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        empty = isinstance(error, json.JSONDecodeError) and not error.doc.strip()
        print(f"runner: warning: skipping {path}: {'it is empty' if empty else error}", file=sys.stderr)
        return {}
    return result


def summarise_run(run_dir: Path, monitor: str, mode: str) -> RunSummary:
    scalars: dict[str, list[Any]] = {}
    if has_events(run_dir):
        accumulator = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
        accumulator.Reload()
        scalars = {tag: accumulator.Scalars(tag) for tag in accumulator.Tags()["scalars"]}
    curve = [(event.step, event.value) for event in scalars.get(monitor, [])]
    finite = [(step, value) for step, value in curve if math.isfinite(value)]
    best_step, best = (None, None)
    if finite:
        best_step, best = (min if mode == "min" else max)(finite, key=lambda point: point[1])
    train_loss = scalars.get("train/loss", [])
    all_events = [event for events in scalars.values() for event in events]
    result = read_result(run_dir / RESULT_FILE)
    wall = result.get("wall_seconds")
    if wall is None and all_events:
        wall = max(e.wall_time for e in all_events) - min(e.wall_time for e in all_events)
    return RunSummary(
        name=run_dir.name,
        overrides=" ".join(overrides_of(run_dir)),
        status=result.get("status", "incomplete"),
        best=best,
        best_step=best_step,
        final_train_loss=train_loss[-1].value if train_loss else None,
        steps=max((event.step for event in all_events), default=0),
        wall_seconds=wall,
        curve=curve,
    )


def ranked(runs: list[RunSummary], mode: str) -> list[RunSummary]:
    """Best first; runs without a finite metric (failed, diverged, not yet validated) last."""

    def key(run: RunSummary) -> tuple[bool, float]:
        if run.best is None:
            return (True, 0.0)
        return (False, run.best if mode == "min" else -run.best)

    return sorted(runs, key=key)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


COLUMNS = ("job", "overrides", "best", "best_step", "final_train_loss", "steps", "wall_seconds", "status")


def rows(runs: list[RunSummary]) -> list[list[str]]:
    return [
        [
            _cell(v)
            for v in (
                r.name,
                r.overrides,
                r.best,
                r.best_step,
                r.final_train_loss,
                r.steps,
                r.wall_seconds,
                r.status,
            )
        ]
        for r in runs
    ]


def write_summary(directory: Path) -> list[RunSummary]:
    """``summary.csv``, ``summary.md`` and ``summary.png`` in ``directory``; returns the ranked runs."""
    run_dirs = find_runs(directory)
    if not run_dirs:
        raise FileNotFoundError(f"{directory} holds no runner run or sweep")
    monitor, mode = monitor_of(run_dirs[0])
    runs = ranked([summarise_run(run_dir, monitor, mode) for run_dir in run_dirs], mode)
    common = common_overrides(run_dirs)
    for run in runs:
        run.overrides = " ".join(o for o in run.overrides.split(" ") if o and o not in common)
    header = [*COLUMNS[:2], f"best {monitor} ({mode})", *COLUMNS[3:]]
    with open(directory / "summary.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows(runs))
    lines = [f"Common to every job: `{' '.join(common)}`", ""] if common else []
    lines += ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows(runs)]
    (directory / "summary.md").write_text("\n".join(lines) + "\n")
    plot_curves(directory / "summary.png", runs, monitor, mode)
    return runs


def plot_curves(path: Path, runs: list[RunSummary], monitor: str, mode: str) -> None:
    try:
        import matplotlib
    except ImportError:
        logging.getLogger("runner").warning(
            "no %s: matplotlib is not installed (pip install 'runner[sweeps]')", path.name
        )
        return

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 5))
    for run in runs:
        if run.curve:
            steps, values = zip(*run.curve, strict=True)
            label = f"{run.name}: {run.overrides}" if run.overrides else run.name
            axes.plot(
                steps, values, marker=".", label=label[:60] + (" (failed)" if run.status == "failed" else "")
            )
    best = runs[0] if runs and runs[0].best is not None else None
    if best is not None:
        axes.plot(
            [best.best_step], [best.best], marker="*", markersize=18, color="gold", markeredgecolor="black",
            linestyle="none", label=f"best: job {best.name}, {monitor} {best.best:.4g}",
        )  # fmt: skip
    axes.set_xlabel("optimizer step")
    axes.set_ylabel(monitor)
    axes.set_title(f"{monitor} per job ({mode} is best)")
    axes.grid(alpha=0.3)
    axes.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
