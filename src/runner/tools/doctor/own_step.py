"""The checklist on a model that writes its own step with several optimizers (``optimizers:``): the
update check counts each optimizer's tensors, and the overfit check runs the model's own step but
skips the verdict, saying why: a GAN's losses oppose each other, no one of them must fall."""

import math
from collections.abc import Callable

from torch import nn

from runner.tools.doctor.probe import FAIL, SKIP, Finding
from runner.training.named_optimizers import NamedOptimizers
from runner.training.step import StepResult


def changed_per_optimizer(optimizer: object, model: nn.Module, changed: list[str]) -> str:
    """`` (discriminator 5 of 5, generator 4 of 4)`` for several optimizers; empty for one."""
    if not isinstance(optimizer, NamedOptimizers):
        return ""
    names = {id(p): n for n, p in model.named_parameters()}
    counts = []
    for name in optimizer.optimizers:
        tensors = [names[id(p)] for p in optimizer.trainable(name)]
        counts.append(f"{name} {sum(n in changed for n in tensors)} of {len(tensors)}")
    return f" ({', '.join(counts)})"


def own_step_overfit(optimizer: NamedOptimizers, step: Callable[[], StepResult], steps: int) -> Finding:
    """The model's own step ``steps`` times on one batch: a loss that goes NaN or Inf fails; else
    skipped, with where each of its losses went."""
    results = [step() for _ in range(steps)]
    series = {name.removeprefix("train/"): [float(r.scalars[name]) for r in results]
              for name in results[0].scalars if not name.startswith("train/grad_norm")}  # fmt: skip
    series = series or {"loss": [float(r.loss) for r in results]}
    went = ", ".join(f"{name} {values[0]:.4g} -> {values[-1]:.4g}" for name, values in series.items())
    broken = [name for name, values in series.items() if not all(math.isfinite(v) for v in values)]
    if broken:
        return Finding(
            FAIL,
            f"the model's own step made {', '.join(broken)} NaN or Inf on one batch ({went})",
            "lower the learning rates (optimizers.<name>.lr); then check the inputs and add clipping "
            "(optimizers.<name>.clip)",
        )
    return Finding(
        SKIP,
        f"a step the model writes, with optimizers {', '.join(optimizer.optimizers)}, has no one "
        f"loss that must fall on one batch (a GAN's oppose each other); its step ran {steps} times: {went}",
    )
