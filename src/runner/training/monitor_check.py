"""The first batch tried before a run writes anything: the model, data and loss together
(``fit_check``), and the monitored metrics. The config check (``config.monitors``) knows which metrics
are configured, not whether they give a value on this run's data: accuracy counts class scores against
integer targets, so on a regression it gives none, and the engine would refuse
``checkpoint.monitor=val/acc`` only after the first validation, with the run directory written. Here
validation runs once on the first batch, with copies of the metrics, under ``eval()`` and no_grad, the
model's carried state handed back as it was."""

import copy
from collections.abc import Mapping
from typing import Any

from runner.config.monitors import check_monitored
from runner.training.carried import NoCarriedState, carried_state_of
from runner.training.fit_check import check_fit
from runner.training.metrics import uses_loss
from runner.training.oom import cut
from runner.training.plan import LoopSettings
from runner.training.step import Learner
from runner.training.validation import evaluate


def check_fit_and_monitors(
    learner: Learner, batch: Any, settings: LoopSettings, scheduler_monitor: str | None,
    callback_monitors: Mapping[str, str],
) -> None:  # fmt: skip
    model = learner.plain_model
    assert model is not None
    checked = check_fit(
        model, batch, learner.loss_fn, learner.device, learner.precision.autocast, learner.target_key,
        learner.step.agreement,
    )  # fmt: skip
    monitors = {"checkpoint.monitor": settings.monitor, "scheduler.monitor": scheduler_monitor}
    monitors |= callback_monitors
    tried = {
        name: metric
        for name, metric in settings.metrics.items()
        if not uses_loss(metric) and f"val/{name}" in monitors.values()
    }
    if not tried:  # val/loss, and the metrics computed from it, always have a value
        return
    carried = carried_state_of(model)
    kept = None if isinstance(carried, NoCarriedState) else copy.deepcopy(carried.state_dict())
    try:
        part = cut(batch, checked, learner.target_key)[0]  # what fitted in memory
        values = evaluate(
            model, [part], learner.loss_fn, learner.device, learner.precision, learner.channels_last,
            copy.deepcopy(tried), learner.target_key,
        )  # fmt: skip
    finally:
        if kept is not None:
            carried.load_state_dict(kept)
    logged = [*values, *(f"val/{name}" for name, metric in settings.metrics.items() if uses_loss(metric))]
    named = {f"val/{name}" for name in tried}
    check_monitored({key: monitor for key, monitor in monitors.items() if monitor in named}, logged)
