"""When the loop validates: a policy beside the checkpointer's (``checkpoint/policy.py``). The loop asks
it at fixed points (a step, an epoch's end, the run's end) and it decides; it remembers the step it
validated last, because an epoch's end, the steps' cadence and the run's end may fall on one step, and a
step is validated once."""

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from runner.training.metrics import unlogged_metrics_warning
from runner.training.plan import LoopSettings

log = logging.getLogger("runner")


@dataclass
class ValidationCadence:
    """``every_n_steps`` optimizer steps and every ``every_n_epochs`` epochs (None: never by that count);
    the run's end validates as well (``on_cadence=False`` in ``engine.validate``) unless its last step
    did."""

    every_n_steps: int | None
    every_n_epochs: int | None
    metrics: Mapping[str, Any]  # the run plan's: the first validation says which it gave no value for
    validated_at_step: int | None = None
    validated_before: bool = False

    @classmethod
    def of(cls, settings: LoopSettings) -> "ValidationCadence":
        return cls(settings.val_every_n_steps, settings.val_every_n_epochs, settings.metrics)

    def at_step(self, step: int) -> bool:
        """Whether the optimizer step just done is one of the steps' cadence."""
        return bool(self.every_n_steps) and step % self.every_n_steps == 0

    def at_epoch_end(self, epoch: int, step: int) -> bool:
        """Whether the end of an epoch validates (``epoch``: the epoch it moved to; ``step``: the epoch's
        last): where its last step does or where the epochs' cadence says."""
        return self.at_step(step) or (bool(self.every_n_epochs) and epoch % self.every_n_epochs == 0)

    def takes(self, step: int) -> bool:
        """Whether ``step`` is still to be validated; from now on, it is not."""
        if self.validated_at_step == step:
            return False
        self.validated_at_step = step
        return True

    def validated(self, values: Mapping[str, float]) -> None:
        """After a validation: the first one warns of the metrics it gave no value for (they are never
        logged, which a user would otherwise find out only from an empty plot)."""
        if not self.validated_before and (warning := unlogged_metrics_warning(self.metrics, values)):
            log.warning(warning)
        self.validated_before = True
