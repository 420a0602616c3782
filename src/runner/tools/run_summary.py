"""A run or a sweep summarised from its files: each job's best value of the monitored metric, its final
metrics, steps and time, ranked best first; a sweep's jobs named by the settings they differ in."""

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tensorboard.backend.event_processing.event_accumulator import ScalarEvent

from runner.config.job_dirs import job_number
from runner.observe.records import best_tag
from runner.tools.job_files import (
    JobFiles,
    effective_batch_of,
    find_runs,
    printable,
    read_job,
    read_yaml,
    wall_seconds_of,
)

DIGITS = 4  # significant digits of every number a summary shows


def significant(value: float) -> str:
    """``value`` to 4 significant digits, without an exponent for large numbers (12350, not 1.235e+04)."""
    text = f"{value:.{DIGITS}g}"
    if "e+" in text and abs(value) < 1e15:
        return str(int(float(text)))
    return text


def rounded(value: str) -> str:
    """An override's value with a float rounded to 4 significant digits (Optuna proposes 17); integers,
    words and lists as given."""
    try:
        int(value)
        return value
    except ValueError:
        pass
    try:
        return significant(float(value))
    except ValueError:
        return value


@dataclass
class RunSummary:
    name: str
    overrides: dict[str, str]  # key -> value, as given on the command line (and in overrides.yaml)
    status: str
    best: float | None
    best_step: int | None
    finals: dict[str, float]  # the last value of each val/* metric and of train/loss
    steps: int
    wall_seconds: float | None
    effective_batch_size: int | None
    curve: list[tuple[int, float]] = field(default_factory=list)  # the monitored metric per step
    pruned_at: int | None = None  # the step a search's pruner stopped it at
    objectives: dict[str, float] = field(default_factory=dict)  # a search's values of this job
    on_pareto_front: bool = False
    time_shares: dict[str, float] = field(default_factory=dict)  # data, compute, validation, runner


TIME_SHARES = ("data", "compute", "validation", "runner")  # logged as vitals/time/<share>


def time_shares_of(scalars: dict[str, list[ScalarEvent]]) -> dict[str, float]:
    """The run's time shares: each ``vitals/time/*`` averaged over its log steps (the intervals between
    log steps are of equal steps); empty for a run that logged none (before runner measured them)."""
    series = {name: scalars.get(f"vitals/time/{name}", []) for name in TIME_SHARES}
    if not all(series.values()):
        return {}
    return {name: sum(event.value for event in events) / len(events) for name, events in series.items()}


@dataclass
class Sweep:
    """A sweep (or a single run) as its summary shows it."""

    runs: list[RunSummary]  # best first
    swept: list[str]  # the keys whose values differ between the jobs
    common: list[str]  # the overrides every job shares, ``key=value``
    monitor: str
    mode: str
    # A multi-objective search's objectives and their directions (minimize, maximize), from its results.
    objectives: list[tuple[str, str]] = field(default_factory=list)


def swept_keys(jobs: list[JobFiles]) -> list[str]:
    """The keys whose value differs between the jobs (or that some jobs leave out), in command-line
    order: what tells the jobs apart."""
    keys = list(dict.fromkeys(key for job in jobs for key in job.overrides))
    return [key for key in keys if len({job.overrides.get(key) for job in jobs}) > 1]


def common_overrides(jobs: list[JobFiles], swept: list[str]) -> list[str]:
    """The overrides every job shares, rounded as the table rounds them."""
    if not jobs:
        return []
    return [f"{key}={rounded(value)}" for key, value in jobs[0].overrides.items() if key not in swept]


def monitor_of(jobs: list[JobFiles]) -> tuple[str, str]:
    """The metric the jobs rank by, from the first job whose ``run.yaml`` names it."""
    for job in jobs:
        checkpoint = job.record.get("checkpoint")
        if isinstance(checkpoint, dict):
            return str(checkpoint.get("monitor", "val/loss")), str(checkpoint.get("mode", "min"))
    return "val/loss", "min"


def final_values(scalars: dict[str, list[ScalarEvent]], monitor: str) -> dict[str, float]:
    """The last value of every ``val/*`` metric, and of ``train/loss``; not the running best of the
    monitored metric (``val/loss_best``), which the best column already shows."""
    running_best = best_tag(monitor)
    tags = [tag for tag in scalars if (tag.startswith("val/") or tag == "train/loss") and tag != running_best]
    return {tag: scalars[tag][-1].value for tag in tags if scalars[tag]}


def summarise_run(job: JobFiles, monitor: str, mode: str) -> RunSummary:
    curve = [(event.step, event.value) for event in job.scalars.get(monitor, [])]
    finite = [(step, value) for step, value in curve if math.isfinite(value)]
    best_step, best = (None, None)
    if finite:
        best_step, best = (min if mode == "min" else max)(finite, key=lambda point: point[1])
    all_events = [event for events in job.scalars.values() for event in events]
    wall = wall_seconds_of(job)
    return RunSummary(
        name=str(number)
        if (number := job_number(job.directory.name)) is not None
        else printable(job.directory.name),
        overrides=job.overrides,
        status=job.result.get("status", "incomplete"),
        best=best,
        best_step=best_step,
        finals=final_values(job.scalars, monitor),
        steps=max((event.step for event in all_events), default=0),
        wall_seconds=wall,
        effective_batch_size=effective_batch_of(job),
        curve=curve,
        pruned_at=pruned if isinstance(pruned := job.result.get("pruned_at_step"), int) else None,
        objectives=finite_values(job.result.get("objectives")),
        time_shares=time_shares_of(job.scalars),
    )


def finite_values(values: Any) -> dict[str, float]:
    if not isinstance(values, dict):
        return {}
    return {str(k): float(v) for k, v in values.items() if isinstance(v, (int, float)) and math.isfinite(v)}


def search_objectives(directory: Path) -> list[tuple[str, str]]:
    """A multi-objective search's (objective, direction) pairs, from its ``optimization_results.yaml``;
    empty for any other sweep."""
    results = read_yaml(directory / "optimization_results.yaml", dict) or {}
    names, directions = results.get("objectives"), results.get("directions")
    if not isinstance(names, list) or not isinstance(directions, list) or len(names) < 2:
        return []
    if len(names) != len(directions) or any(d not in ("minimize", "maximize") for d in directions):
        return []
    return [(str(name), str(direction)) for name, direction in zip(names, directions, strict=True)]


def mark_pareto_front(runs: list[RunSummary], objectives: list[tuple[str, str]]) -> None:
    """The finished jobs no other finished job beats in every objective (and in one strictly)."""
    signs = [1.0 if direction == "minimize" else -1.0 for _, direction in objectives]

    def values(run: RunSummary) -> list[float] | None:
        if run.status != "ok" or any(name not in run.objectives for name, _ in objectives):
            return None
        return [sign * run.objectives[name] for sign, (name, _) in zip(signs, objectives, strict=True)]

    candidates = [(run, v) for run in runs if (v := values(run)) is not None]
    for run, mine in candidates:
        run.on_pareto_front = not any(
            all(a <= b for a, b in zip(other, mine, strict=True)) and other != mine for _, other in candidates
        )


def ranked(runs: list[RunSummary], mode: str) -> list[RunSummary]:
    """Best first; runs without a finite metric (failed, diverged, not yet validated) last."""

    def key(run: RunSummary) -> tuple[bool, float]:
        if run.best is None:
            return (True, 0.0)
        return (False, run.best if mode == "min" else -run.best)

    return sorted(runs, key=key)


def summarise(directory: Path) -> Sweep:
    """The sweep (or run) in ``directory``, read from its files."""
    run_dirs = find_runs(directory)
    if not run_dirs:
        raise FileNotFoundError(f"{directory} holds no runner run or sweep")
    jobs = [read_job(run_dir) for run_dir in run_dirs]
    monitor, mode = monitor_of(jobs)
    runs = ranked([summarise_run(job, monitor, mode) for job in jobs], mode)
    objectives = search_objectives(directory)
    mark_pareto_front(runs, objectives)
    swept = swept_keys(jobs)
    return Sweep(runs, swept, common_overrides(jobs, swept), monitor, mode, objectives)
