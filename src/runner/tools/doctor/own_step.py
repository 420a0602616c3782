"""The checklist on a model that writes its own step (``training_step``): the update check runs that
step once, as a run does, on a window of the run's ``accumulate`` micro-batches (a step that updates
nothing, updates without a backward, or updates on an earlier micro-batch only, fails with the run's
own line), and counts each optimizer's tensors (what it drew, its buffers and check 5's
gradients put back); the overfit check runs the model's own step but skips the verdict, saying why:
a GAN's losses oppose each other, no one of them must fall."""

import math
from collections.abc import Callable

import torch
from torch import nn

from runner.config.errors import UserError
from runner.tools.doctor.probe import FAIL, SKIP, Finding, Probe
from runner.training.manual_step import MODELS_STEP, OWN_STEP
from runner.training.named_optimizers import NamedOptimizers
from runner.training.random_state import kept_random_state
from runner.training.step import Learner, StepResult

ADVICE_OWN_STEP = (
    "in training_step, call step.backward(loss, name) and then step.update(name) for each optimizer it trains"
)


def own_step_once(probe: Probe, optimizer: NamedOptimizers) -> str | None:
    """One step of the model's own ``training_step`` on the probe's batch, as a run takes it (the
    optimizers stepped by what the model calls, not by doctor); the line a run would stop with where
    the step trains nothing or fails, else None. Its buffers and check 5's gradients are put back (the
    caller puts the parameters back)."""
    setup, model = probe.setup, probe.setup.model
    buffers = {name: buffer.clone() for name, buffer in model.named_buffers()}
    grads = {name: p.grad for name, p in model.named_parameters()}
    learner = Learner(model, setup.loss_fn, optimizer, setup.precision, setup.device, False, setup.target_key,
                      step=MODELS_STEP)  # fmt: skip
    try:
        with kept_random_state():  # the later checks draw as they would without this one
            # A window of the run's accumulate: an update called on its earlier micro-batch only is said.
            window = [probe.batch] * setup.micro_batches_per_step
            learner.step.train(learner, window, setup.clip, check_finite=False)
    except UserError as error:
        return str(error)
    except Exception as error:  # the model's own code: a finding, and the model put back all the same
        first_line = str(error).partition("\n")[0]
        return f"the model's {OWN_STEP} raised {type(error).__name__}: {first_line}"
    finally:
        with torch.no_grad():
            for name, buffer in model.named_buffers():
                buffer.copy_(buffers[name])
        for name, parameter in model.named_parameters():
            parameter.grad = grads[name]
    return None


def changed_per_optimizer(optimizer: object, model: nn.Module, changed: list[str]) -> str:
    """`` (discriminator 5 of 5, generator 4 of 4)`` for several optimizers; empty for one."""
    if not isinstance(optimizer, NamedOptimizers) or len(optimizer.optimizers) == 1:
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
