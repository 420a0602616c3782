"""``summary.png``'s figure: the monitored metric of every job over training, the best marked."""

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from runner.tools.run_summary import RunSummary, Sweep, rounded
from runner.tools.summary_table import better, shown_value

if TYPE_CHECKING:  # matplotlib is optional (the sweeps extra) and slow to import
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


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
    return f"best: {job}{monitor} {shown_value(best.best)} at step {best.best_step}"


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
