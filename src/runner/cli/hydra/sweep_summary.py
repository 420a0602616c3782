"""The Hydra callback that summarises a sweep when it ends (the summary itself is in report.py)."""

import logging
import os
from pathlib import Path
from typing import Any

from hydra.core.utils import configure_log
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from runner.cli.exits import exit_with

log = logging.getLogger("runner")


class SweepSummary(Callback):
    """Writes ``summary.csv``, ``summary.md`` and ``summary.png`` into the sweep directory, then
    exits non-zero if any job failed (after every job has run)."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from runner.checkpoint.durable import WriteError
        from runner.tools.report import write_summary  # only now: its TensorBoard reader is slow to import

        sweep_dir = Path(config.hydra.sweep.dir)
        if not sweep_dir.is_dir() or int(os.environ.get("RANK", 0)) != 0:  # under torchrun: rank 0 only
            return
        # The sweep's logging again: the last job's (its train.log among its handlers) is still set.
        configure_log(config.hydra.hydra_logging, config.hydra.verbose)
        try:
            runs = write_summary(sweep_dir)
        except WriteError as error:  # the jobs' own files are kept; report rebuilds the summary later
            exit_with(error.with_advice(f"the jobs' files are kept; free space and run: python -m runner "
                                        f"report {sweep_dir}"))  # fmt: skip
        log.info("sweep summary (%s):\n%s", sweep_dir / "summary.md", (sweep_dir / "summary.md").read_text())
        failed = [run.name for run in runs if run.status == "failed"]
        if (sweep_dir / "mlflow_sweep.json").is_file():  # logger=[mlflow]: the sweep's parent run ends
            from runner.observe.mlflow_tracker import end_sweep_parent

            end_sweep_parent(sweep_dir, failed=bool(failed))
        if failed:
            log.error(
                "%d of %d jobs failed (jobs %s); see their train.log",
                len(failed),
                len(runs),
                ", ".join(failed),
            )
            raise SystemExit(1)
