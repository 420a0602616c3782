"""Summaries of runs and sweeps, rebuilt from what each run left on disk: TensorBoard events,
``.hydra/overrides.yaml``, ``run.yaml`` and ``result.json``. Works on interrupted sweeps too.

A sweep's table and plot name each job by its swept settings only (the overrides whose value differs
between jobs); what every job shares is said once above the table."""

import csv
import errno
import io
import json
import logging
import math
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator, ScalarEvent

from runner.checkpoint.durable import WriteError, atomic_write, writing
from runner.observe.events import wall_time_span
from runner.observe.hparams import HPARAMS_FILE
from runner.observe.records import RESULT_FILE, best_tag
from runner.observe.sweep_hparams import EXPERIMENT_FILE

if TYPE_CHECKING:  # matplotlib is optional (the sweeps extra) and slow to import
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

logging.getLogger("tensorboard").setLevel(logging.WARNING)  # its event reader chats at INFO

DIGITS = 4  # significant digits of every number a summary shows


@dataclass
class JobFiles:
    """What one job left on disk, each file read once (a damaged one warns once)."""

    directory: Path
    overrides: dict[str, str]
    record: dict[str, Any]
    result: dict[str, Any]
    scalars: dict[str, list[ScalarEvent]]


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


def has_events(directory: Path) -> bool:
    """A run's event files; a sweep directory holds only the columns of its HParams tab."""
    return any(path.name != EXPERIMENT_FILE for path in directory.glob("events.out.tfevents.*"))


def find_runs(directory: Path) -> list[Path]:
    """A single run directory, or the job directories of a sweep (numbered ones in order)."""
    if has_events(directory) or (directory / RESULT_FILE).exists():
        return [directory]
    jobs = [path for path in directory.iterdir() if path.is_dir() and (path / ".hydra").is_dir()]
    return sorted(
        jobs,
        key=lambda path: (not path.name.isdigit(), int(path.name) if path.name.isdigit() else 0, path.name),
    )


def plain_file(path: Path) -> bool:
    """Whether ``path`` is a file to read: a FIFO would block the read, a device (``/dev/zero``) never end
    it; either is skipped with a warning."""
    if path.is_file():
        return True
    print(f"runner: warning: skipping {path}: it is not a plain file", file=sys.stderr)
    return False


def read_yaml(path: Path, kind: type) -> Any:
    """A run's YAML record, or None where it is missing or damaged (then the summary does without it,
    with a warning)."""
    if not path.exists() or not plain_file(path):
        return None
    try:
        content = yaml.safe_load(path.read_text())
    except RecursionError:  # lists or mappings nested thousands deep: no record runner writes
        print(f"runner: warning: skipping {path}: it is nested too deeply", file=sys.stderr)
        return None
    except (OSError, ValueError, yaml.YAMLError) as error:
        print(f"runner: warning: skipping {path}: {str(error).splitlines()[0]}", file=sys.stderr)
        return None
    if content is not None and not isinstance(content, kind):
        print(f"runner: warning: skipping {path}: it holds a {type(content).__name__}", file=sys.stderr)
        return None
    return content


def read_result(path: Path) -> dict[str, Any]:
    """A run's ``result.json``. A damaged one (a full disk once left 0 bytes) is skipped with a
    warning, and the run is summarised from its events."""
    if not path.exists() or not plain_file(path):
        return {}
    try:
        result = json.loads(path.read_text())
        if not isinstance(result, dict):
            raise ValueError(f"it holds a JSON {type(result).__name__}, not an object")
    except RecursionError:  # arrays or objects nested thousands deep: no record runner writes
        print(f"runner: warning: skipping {path}: it is nested too deeply", file=sys.stderr)
        return {}
    except (OSError, ValueError) as error:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        empty = isinstance(error, json.JSONDecodeError) and not error.doc.strip()
        print(f"runner: warning: skipping {path}: {'it is empty' if empty else error}", file=sys.stderr)
        return {}
    return result


def split_override(override: str) -> tuple[str, str]:
    """``key=value`` as (key, value); ``+key``/``++key`` name the same key, ``~key`` removes it."""
    key, _, value = override.partition("=")
    if key.startswith("~"):
        return key.lstrip("~"), "removed"
    return key.lstrip("+"), value


def overrides_of(run_dir: Path) -> dict[str, str]:
    """The overrides the run last ran with: a resume's record (``.hydra/resume-<time>/``, holding the
    original overrides it applied again and the ones it changed) over the original; not ``resume``, which
    names a file."""
    resumes = sorted((run_dir / ".hydra").glob("resume-*/overrides.yaml"))
    overrides = read_yaml(resumes[-1] if resumes else run_dir / ".hydra" / "overrides.yaml", list) or []
    pairs = dict(split_override(str(override)) for override in overrides)
    pairs.pop("resume", None)
    return pairs


def read_scalars(run_dir: Path) -> dict[str, list[ScalarEvent]]:
    if not has_events(run_dir):
        return {}
    # TensorBoard reads every event file of the folder: one that is not a plain file stops them all.
    if not all(plain_file(path) for path in run_dir.glob("events.out.tfevents.*")):
        return {}
    accumulator = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    accumulator.Reload()
    return {tag: accumulator.Scalars(tag) for tag in accumulator.Tags()["scalars"]}


def read_job(run_dir: Path) -> JobFiles:
    """Every record of a job, read once, so a damaged file warns once."""
    return JobFiles(
        directory=run_dir,
        overrides=overrides_of(run_dir),
        record=read_yaml(run_dir / "run.yaml", dict) or {},
        result=read_result(run_dir / RESULT_FILE),
        scalars=read_scalars(run_dir),
    )


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


def effective_batch_of(job: JobFiles) -> int | None:
    """Samples per optimizer step (batch x accumulate x world size), as the run resolved it."""
    runtime = job.record.get("runtime")
    size = runtime.get("effective_batch_size") if isinstance(runtime, dict) else None
    return size if isinstance(size, int) and size > 0 else None


def final_values(scalars: dict[str, list[ScalarEvent]], monitor: str) -> dict[str, float]:
    """The last value of every ``val/*`` metric, and of ``train/loss``; not the running best of the
    monitored metric (``val/loss_best``), which the best column already shows."""
    running_best = best_tag(monitor)
    tags = [tag for tag in scalars if (tag.startswith("val/") or tag == "train/loss") and tag != running_best]
    return {tag: scalars[tag][-1].value for tag in tags if scalars[tag]}


def wall_seconds_of(job: JobFiles) -> float | None:
    """The run's time over all its processes (a resumed run has one per start): ``result.json``'s for
    the process that wrote it (the last), plus the logging time of each earlier process's event file.
    The time between processes (stopped, waiting for a resume) is not the run's."""
    spans = sorted(span for path in event_files(job.directory) if (span := wall_time_span(path)))
    recorded = job.result.get("wall_seconds")
    if not isinstance(recorded, int | float):
        return sum(last - first for first, last in spans) if spans else None
    return recorded + sum(last - first for first, last in spans[:-1])


def event_files(run_dir: Path) -> list[Path]:
    """A run's event files of scalars, one per process that logged (not its HParams record)."""
    return [
        path for path in run_dir.glob("events.out.tfevents.*")
        if path.name != HPARAMS_FILE and path.is_file()  # a device would be read without end
    ]  # fmt: skip


def summarise_run(job: JobFiles, monitor: str, mode: str) -> RunSummary:
    curve = [(event.step, event.value) for event in job.scalars.get(monitor, [])]
    finite = [(step, value) for step, value in curve if math.isfinite(value)]
    best_step, best = (None, None)
    if finite:
        best_step, best = (min if mode == "min" else max)(finite, key=lambda point: point[1])
    all_events = [event for events in job.scalars.values() for event in events]
    wall = wall_seconds_of(job)
    return RunSummary(
        name=job.directory.name,
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


def _cell(value: Any) -> str:
    """For people: numbers (and swept values) to 4 significant digits."""
    if value is None:
        return ""
    if isinstance(value, float):
        return significant(value)
    return rounded(value) if isinstance(value, str) else str(value)


def _exact(value: Any) -> str:
    """For programs: swept values as given; numbers to 7 significant digits, all a metric has (TensorBoard
    stores float32)."""
    return "" if value is None else f"{value:.7g}" if isinstance(value, float) else str(value)


def column_name(metric: str) -> str:
    """A metric as a plain CSV column name: ``val/loss`` -> ``val_loss``."""
    return re.sub(r"[^0-9A-Za-z_.]+", "_", metric)


@dataclass(frozen=True)
class Column:
    csv: str
    markdown: str | None  # None: in the CSV only (the Markdown says it once, above the table)
    value: Callable[[RunSummary], Any]
    shown: Callable[[RunSummary], Any] | None = None  # the Markdown's cell, where it says more

    def cell(self, run: RunSummary) -> Any:
        return (self.shown or self.value)(run)


def columns(sweep: Sweep) -> list[Column]:
    """job, status, one column per swept key, the best monitored value and its step, the final
    metrics, steps and wall time."""
    monitor, mode = sweep.monitor, sweep.mode
    tags = sorted({tag for run in sweep.runs for tag in run.finals if tag.startswith("val/")})
    if any("train/loss" in run.finals for run in sweep.runs):
        tags.append("train/loss")
    pruned = any(run.pruned_at is not None for run in sweep.runs)
    return [
        Column("job", "job", lambda run: run.name),
        Column("status", "status", lambda run: run.status, shown=status_text),
        *([Column("pruned_at_step", None, lambda run: run.pruned_at)] if pruned else []),
        *(Column(key, key, lambda run, key=key: run.overrides.get(key, "")) for key in sweep.swept),
        *(
            [Column("pareto_front", "Pareto front", lambda run: "yes" if run.on_pareto_front else "")]
            if sweep.objectives
            else []
        ),
        *(
            Column(
                f"{column_name(name)}_at_best",
                f"{name} at best ({direction[:3]})",
                lambda run, name=name: run.objectives.get(name),
            )
            for name, direction in sweep.objectives
            if name != monitor
        ),
        Column(f"best_{column_name(monitor)}", f"best {monitor} ({mode})", lambda run: run.best),
        Column("mode", None, lambda run: mode),
        Column("step_of_best", "step of best", lambda run: run.best_step),
        *(Column(f"final_{column_name(t)}", f"final {t}", lambda run, t=t: run.finals.get(t)) for t in tags),
        Column("steps", "steps", lambda run: run.steps),
        Column("wall_seconds", "wall seconds", lambda run: run.wall_seconds),
    ]


def status_text(run: RunSummary) -> str:
    """For people: ``pruned at step 40``, else the status as recorded."""
    return f"pruned at step {run.pruned_at}" if run.pruned_at is not None else run.status


def csv_text(runs: list[RunSummary], table: list[Column]) -> str:
    """The table for programs: plain column names, values to full precision, Unix line ends, a final
    newline."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([column.csv for column in table])
    writer.writerows([_exact(column.value(run)) for column in table] for run in runs)
    return buffer.getvalue()


def write_whole(path: Path, write: Callable[[BinaryIO], None]) -> None:
    """A summary file replaced whole (``durable.atomic_write``): a full disk leaves the old file, never
    an empty or half one. The new file is renamed over the name, so a ``summary.csv`` that is a link
    is replaced by the file; what the link pointed to, perhaps outside the sweep, is left alone."""
    if path.is_dir() and not path.is_symlink():
        raise WriteError(path, errno.EISDIR, "move that folder away: the summary is written under its name")
    with writing(path):
        atomic_write(path, write)


def markdown(sweep: Sweep, table: list[Column]) -> str:
    """The table for people: what ranks the jobs and what they share said once, above it."""
    shown = [column for column in table if column.markdown is not None]
    several = len(sweep.runs) > 1
    lines = [f"Best first by {sweep.monitor} ({better(sweep.mode)} is better)."] if several else []
    if sweep.objectives:
        front = [run.name for run in sweep.runs if run.on_pareto_front]
        wanted = ", ".join(f"{direction} {name}" for name, direction in sweep.objectives)
        lines.append(f"Pareto front ({wanted}, each at the job's best validation): "
                     f"{'jobs ' + ', '.join(front) if front else 'no finished job'}.")  # fmt: skip
    if sweep.common:
        lines.append(f"{'Common to every job' if several else 'Overrides'}: `{' '.join(sweep.common)}`")
    lines += [
        "",
        "| " + " | ".join(str(column.markdown) for column in shown) + " |",
        "|" + " --- |" * len(shown),
    ]
    for run in sweep.runs:
        cells = [_cell(column.cell(run)).replace("|", "\\|") for column in shown]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def better(mode: str) -> str:
    return "lower" if mode == "min" else "higher"


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


def write_summary(directory: Path) -> list[RunSummary]:
    """``summary.csv``, ``summary.md`` and ``summary.png`` in ``directory``; returns the ranked runs. A
    write the machine refuses (a full disk, a read-only folder) is a ``WriteError`` naming the file."""
    sweep = summarise(directory)
    table = columns(sweep)
    write_whole(directory / "summary.csv", lambda handle: handle.write(csv_text(sweep.runs, table).encode()))
    write_whole(directory / "summary.md", lambda handle: handle.write(markdown(sweep, table).encode()))
    plot_curves(directory / "summary.png", sweep)
    return sweep.runs


def x_axis(runs: list[RunSummary]) -> tuple[Callable[[RunSummary, int], float], str]:
    """Samples seen where the jobs' effective batch sizes differ (a step of a batch-64 job sees twice
    the data of a batch-32 one), else optimizer steps; with the axis label that says which."""
    sizes = {run.effective_batch_size for run in runs if run.curve}
    if len(sizes) > 1 and None not in sizes:
        return (
            lambda run, step: step * (run.effective_batch_size or 1),
            "samples seen (optimizer steps x effective batch size)",
        )
    label = "optimizer step"
    if len(sizes) == 1 and None not in sizes:
        label += f" (effective batch size {next(iter(sizes))}{' in every job' if len(runs) > 1 else ''})"
    return (lambda run, step: step), label


def legend_label(run: RunSummary, swept: list[str]) -> str:
    """``3: optimizer.lr=0.009541, data.batch_size=32``: what tells this job apart, and whether it ended."""
    settings = ", ".join(f"{key}={rounded(run.overrides[key])}" for key in swept if key in run.overrides)
    label = f"{run.name}: {settings}" if settings else run.name
    return label + (f" ({run.status})" if run.status != "ok" else "")


def line_styles(count: int) -> list[tuple[Any, str]]:
    """A colour and line style per job, best first: ten strong colours, then their light shades dashed,
    so neighbours in the ranking never share a hue."""
    from matplotlib import colormaps

    if count <= 10:
        return [(color, "-") for color in colormaps["tab10"].colors[:count]]
    shades = colormaps["tab20"].colors
    styles = [(color, "-") for color in shades[0::2]] + [(color, "--") for color in shades[1::2]]
    return [styles[index % len(styles)] for index in range(count)]


def wide_range(values: list[float]) -> bool:
    """Positive values over more than a factor of 10 (a slow job beside fast ones): a log axis keeps the
    good jobs apart at the bottom."""
    finite = [value for value in values if math.isfinite(value)]
    return bool(finite) and min(finite) > 0 and max(finite) > 10 * min(finite)


def best_label(best: RunSummary, monitor: str, several: bool) -> str:
    job = f"job {best.name}, " if several else ""
    return f"best: {job}{monitor} {_cell(best.best)} at step {best.best_step}"


def plot_curves(path: Path, sweep: Sweep) -> None:
    """``summary.png``: the curves of ``draw_curves``, the image sized to hold its legend."""
    try:
        import matplotlib
    except ImportError:
        logging.getLogger("runner").warning(
            "no %s: matplotlib is not installed (pip install 'runner[sweeps]')", path.name
        )
        return

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure = draw_curves(sweep)
    try:  # tight: the image grows to hold the legend
        write_whole(path, lambda handle: figure.savefig(handle, format="png", dpi=110, bbox_inches="tight"))
    finally:
        plt.close(figure)


def draw_curves(sweep: Sweep) -> "Figure":
    """The monitored metric of every job over training, best job marked; the legend (beside the plot,
    best first) names each job by its swept settings."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import EngFormatter

    runs, swept, monitor = sweep.runs, sweep.swept, sweep.monitor
    plotted = [run for run in runs if run.curve]
    x_of, x_label = x_axis(plotted)
    figure, axes = plt.subplots(figsize=(7, 4.5))
    handles = []
    for index, (run, (color, style)) in enumerate(zip(plotted, line_styles(len(plotted)), strict=True)):
        xs = [x_of(run, step) for step, _ in run.curve]
        values = [value for _, value in run.curve]
        (line,) = axes.plot(xs, values, style, marker="o", markersize=4, color=color,
                            zorder=3 + len(plotted) - index, label=legend_label(run, swept))  # fmt: skip
        handles.append(line)
    best = runs[0] if runs and runs[0].best is not None and runs[0].best_step is not None else None
    if best is not None and best.best_step is not None:
        (star,) = axes.plot(
            [x_of(best, best.best_step)], [best.best], marker="*", markersize=16, color="gold",
            markeredgecolor="black", linestyle="none", zorder=4 + len(plotted),
            label=best_label(best, monitor, len(runs) > 1),
        )  # fmt: skip
        handles.insert(0, star)
    if wide_range([value for run in plotted for _, value in run.curve]):
        log_scale(axes)
    axes.xaxis.set_major_formatter(EngFormatter(sep=""))
    axes.set_xlabel(x_label)
    axes.set_ylabel(monitor + (" (log scale)" if axes.get_yscale() == "log" else ""))
    axes.set_title(f"{monitor}{' per job' if len(runs) > 1 else ''} ({better(sweep.mode)} is better)")
    axes.grid(alpha=0.3, which="both")
    if handles:
        title = "job: swept settings (best first)" if swept else "job"
        axes.legend(handles=handles, title=title, fontsize=8, title_fontsize=8,
                    loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)  # fmt: skip
    return figure


def log_scale(axes: "Axes") -> None:
    """A log y axis labelled with plain values (0.1 0.2 0.5 1 2) rather than powers of ten."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axes.set_yscale("log")
    axes.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    axes.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axes.yaxis.set_minor_formatter(NullFormatter())
