"""Where numbers go: TensorBoard event files in the run directory, and the console.

The engine hands over device tensors; they are read (one host sync) only here, at log time.
"""

import logging
import math
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from tensorboard.compat.proto.summary_pb2 import Summary
from torch.utils.tensorboard import SummaryWriter, summary

log = logging.getLogger("runner")


def to_floats(values: Mapping[str, torch.Tensor | float]) -> dict[str, float]:
    """Read every tensor with a single device-to-host copy."""
    names = [name for name, value in values.items() if isinstance(value, torch.Tensor)]
    read = torch.stack([values[name].detach().float() for name in names]).tolist() if names else []
    floats = dict(zip(names, read, strict=True))
    return {name: floats.get(name, value) for name, value in values.items()}


class TensorBoardLogger:
    """Scalars and text for one run, written as real TensorBoard event files."""

    def __init__(self, log_dir: Path, purge_step: int | None = None) -> None:
        self.writer = SummaryWriter(log_dir=str(log_dir), purge_step=purge_step)

    def log_scalars(self, step: int, scalars: Mapping[str, float]) -> None:
        """All of a step's scalars as one event: a fraction of the cost of one event per tag."""
        values = [value for tag, number in scalars.items() for value in summary.scalar(tag, number).value]
        self.writer.file_writer.add_summary(Summary(value=values), global_step=step)

    def log_text(self, tag: str, text: str) -> None:
        # Indented four spaces, TensorBoard's markdown shows the text as a code block, lines intact.
        self.writer.add_text(tag, "\n".join("    " + line for line in text.splitlines()))

    def log_hparams(self, step: int, hparams: Mapping[str, Any], metrics: Mapping[str, float | None]) -> None:
        """Into this run itself (``run_name="."``), not a stray extra run; missing metrics as NaN."""
        values = {name: math.nan if value is None else value for name, value in metrics.items()}
        self.writer.add_hparams(dict(hparams), values, run_name=".", global_step=step)

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class Progress:
    """A tqdm bar when stdout is a terminal; plain log lines (one per validation) otherwise."""

    def __init__(self, total_steps: int, initial_step: int = 0) -> None:
        self.bar = None
        if sys.stdout.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total_steps, initial=initial_step, unit="step", dynamic_ncols=True)

    def update(self, step: int, scalars: Mapping[str, float]) -> None:
        if self.bar is not None:
            self.bar.n = step
            self.bar.set_postfix(
                loss=f"{scalars['train/loss']:.4g}",
                lr=f"{scalars['train/lr']:.3g}",
                speed=f"{scalars['perf/samples_per_sec']:.0f}/s",
                refresh=False,
            )
            self.bar.refresh()

    def report(self, epoch: int, step: int, metrics: Mapping[str, float | None]) -> None:
        line = f"epoch {epoch} step {step} | " + " | ".join(
            f"{name} {value:.4g}" for name, value in metrics.items() if value is not None
        )
        if self.bar is not None:
            self.bar.write(line)
        else:
            log.info(line)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class NullLogger:
    """What ranks other than 0 log to TensorBoard: nothing."""

    def log_scalars(self, step: int, scalars: Mapping[str, float]) -> None:
        pass

    def log_text(self, tag: str, text: str) -> None:
        pass

    def log_hparams(self, step: int, hparams: Mapping[str, Any], metrics: Mapping[str, float | None]) -> None:
        pass

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass
