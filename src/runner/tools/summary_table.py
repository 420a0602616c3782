"""A sweep's summary as tables: ``summary.csv`` for programs (every value in full) and ``summary.md``
for people (numbers to 4 significant digits, what ranks the jobs and what they share said once)."""

import csv
import io
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from runner.tools.run_summary import TIME_SHARES, RunSummary, Sweep, rounded, significant


def shown_value(value: Any) -> str:
    """For people: numbers (and swept values) to 4 significant digits."""
    if value is None:
        return ""
    if isinstance(value, float):
        return significant(value)
    return rounded(value) if isinstance(value, str) else str(value)


def exact_value(value: Any) -> str:
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
    timed = TIME_SHARES if any(run.time_shares for run in sweep.runs) else ()
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
        *(Column(f"time_{name}", f"time {name}", lambda run, name=name: run.time_shares.get(name),
                 shown=lambda run, name=name: percent(run.time_shares.get(name))) for name in timed),
    ]  # fmt: skip


def percent(share: float | None) -> str | None:
    """A time share for people: ``81%``."""
    return None if share is None else f"{100 * share:.0f}%"


def status_text(run: RunSummary) -> str:
    """For people: ``pruned at step 40``, else the status as recorded."""
    return f"pruned at step {run.pruned_at}" if run.pruned_at is not None else run.status


def csv_text(runs: list[RunSummary], table: list[Column]) -> str:
    """The table for programs: plain column names, values to full precision, Unix line ends, a final
    newline."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([column.csv for column in table])
    writer.writerows([exact_value(column.value(run)) for column in table] for run in runs)
    return buffer.getvalue()


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
        cells = [shown_value(column.cell(run)).replace("|", "\\|") for column in shown]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def better(mode: str) -> str:
    return "lower" if mode == "min" else "higher"
