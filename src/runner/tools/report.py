"""Summaries of runs and sweeps, rebuilt from what each run left on disk: TensorBoard events,
``.hydra/overrides.yaml``, ``run.yaml`` and ``result.json``. Works on interrupted sweeps too.

A sweep's table and plot name each job by its swept settings only (the overrides whose value differs
between jobs); what every job shares is said once above the table."""

import errno
import logging
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from runner.checkpoint.durable import WriteError, atomic_write, writing
from runner.tools.run_summary import RunSummary, Sweep, summarise
from runner.tools.summary_plot import draw_curves
from runner.tools.summary_table import columns, csv_text, markdown


def write_summary(directory: Path) -> list[RunSummary]:
    """``summary.csv``, ``summary.md`` and ``summary.png`` in ``directory``; returns the ranked runs. A
    write the machine refuses (a full disk, a read-only folder) is a ``WriteError`` naming the file."""
    sweep = summarise(directory)
    table = columns(sweep)
    write_whole(directory / "summary.csv", lambda handle: handle.write(csv_text(sweep.runs, table).encode()))
    write_whole(directory / "summary.md", lambda handle: handle.write(markdown(sweep, table).encode()))
    plot_curves(directory / "summary.png", sweep)
    return sweep.runs


def write_whole(path: Path, write: Callable[[BinaryIO], None]) -> None:
    """A summary file replaced whole (``durable.atomic_write``): a full disk leaves the old file, never
    an empty or half one. The new file is renamed over the name, so a ``summary.csv`` that is a link
    is replaced by the file; what the link pointed to, perhaps outside the sweep, is left alone."""
    if path.is_dir() and not path.is_symlink():
        raise WriteError(path, errno.EISDIR, "move that folder away: the summary is written under its name")
    with writing(path):
        atomic_write(path, write)


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
