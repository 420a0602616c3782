"""``logger=[wandb]``: the run as a Weights & Biases run, through ``wandb.init`` and ``Run.log``.

``wandb.mode=offline`` writes it under the run's directory (``wandb/offline-run-*``) with no network;
``wandb sync`` uploads it later. ``wandb.mode=null`` leaves the choice to W&B (``WANDB_MODE``, else
online, which needs ``wandb login``). The run is named after its directory; a sweep's jobs are one W&B
group, named after the sweep's directory. It gets the whole config (flattened, ``optimizer.lr``), every
scalar the event file gets at the same step, and at its end the monitored metric's best value and step
in its summary. A resumed run continues the same W&B run id (``resume="allow"``).
"""

import logging
import secrets
from collections.abc import Mapping
from typing import Any

import wandb

from runner.config.errors import UserError

log = logging.getLogger("runner")


class WandbTracker:
    name = "wandb"

    def __init__(self, start: Any) -> None:
        settings, sweep_dir = start.settings, start.sweep_dir
        run_id = start.earlier.get("id") or secrets.token_hex(4)
        try:
            self.run = wandb.init(
                project=settings.project, entity=settings.entity, mode=settings.mode,
                dir=start.run_dir, id=run_id, resume="allow", name=start.run_dir.name,
                group=sweep_dir.name if sweep_dir is not None else None, config=dict(start.hparams),
                reinit="create_new", settings=wandb.Settings(console="off", silent=True),
            )  # fmt: skip
        except Exception as error:  # wandb raises its own errors (no login, no network) at the start
            raise UserError(
                f"logger=wandb: cannot start a W&B run (wandb.mode={settings.mode or 'null'}): "
                f"{str(error).splitlines()[0] if str(error) else type(error).__name__}; "
                "wandb.mode=offline writes it with no network"
            ) from None
        self.record = {"id": run_id, "project": settings.project}
        log.info("wandb: run %s (%s) in project %s", run_id, self.run.settings.mode, settings.project)

    def log_scalars(self, step: int, scalars: Mapping[str, float]) -> None:
        self.run.log(dict(scalars), step=step)

    def log_text(self, tag: str, text: str) -> None:
        pass  # the run plan is in train.log and TensorBoard's text tab

    def finish(self, status: str, result: Mapping[str, Any]) -> None:
        for key in ("monitor", "best", "best_step"):
            if result.get(key) is not None:
                self.run.summary[f"runner/{key}"] = result[key]
        self.run.summary["runner/status"] = status
        self.run.finish(exit_code=0 if status == "ok" else 1)

    def close(self) -> None:
        self.run.finish()  # nothing if already finished
