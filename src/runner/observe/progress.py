"""Progress on the console: a tqdm bar on a terminal, plain log lines otherwise."""

import logging
import sys
from collections.abc import Mapping

log = logging.getLogger("runner")


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
