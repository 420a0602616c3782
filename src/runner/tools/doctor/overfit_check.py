"""The checklist's last check: the run's own training step (loss scaling and clipping as configured)
overfits one batch, or the finding says why not."""

import copy
import math

import torch

from runner.experiment.optimizers import chosen_step
from runner.tools.doctor.own_step import own_step_overfit
from runner.tools.doctor.probe import ADVICE_LOSS_FIRST, FAIL, PASS, SKIP, Finding, Probe, value_text
from runner.training.carried import carried_state_of
from runner.training.modes import set_apart, start_training
from runner.training.named_optimizers import NamedOptimizers
from runner.training.step import Learner


def check_overfit(probe: Probe, steps: int = 100) -> Finding:
    """The run's own training step (loss scaling and clipping as configured), on one batch."""
    setup = probe.setup
    if probe.loss is not None and not probe.loss.requires_grad:
        return Finding(SKIP, "the loss has no gradient; see checks 5 and 6")
    model = copy.deepcopy(setup.model)
    start_training(model, set_apart(model))  # as the run starts: a frozen teacher stays in eval()
    model.zero_grad(set_to_none=True)
    optimizer = setup.optimizer_factory(model)
    learner = Learner(model, setup.loss_fn, optimizer, setup.precision, setup.device, False, setup.target_key,
                      step=chosen_step(optimizer))  # fmt: skip
    window, carried = [probe.batch], carried_state_of(model)

    def step_from_the_same_state() -> float:
        carried.reset()  # a model that carries a state from batch to batch: one batch, from one state
        return learner.step.train(learner, window, setup.clip, check_finite=False).loss.item()

    if isinstance(optimizer, NamedOptimizers) and len(optimizer.optimizers) > 1:  # own_step.py
        return own_step_overfit(
            optimizer, lambda: learner.step.train(learner, window, setup.clip, False), steps
        )
    losses = [step_from_the_same_state() for _ in range(steps)]
    if not all(math.isfinite(loss) for loss in losses[-5:]):
        went = next(step for step, loss in enumerate(losses, start=1) if not math.isfinite(loss))
        kind = "NaN" if any(math.isnan(loss) for loss in losses[went - 1 :]) else "Inf"
        advice = "lower the learning rate (optimizer.lr); then check the inputs" + (
            "" if setup.clip is not None else " and add gradient clipping (clip=1.0)"
        )
        if went == 1:
            found = f"the loss is {kind} from the first step on one batch"
            if probe.loss is not None and not torch.isfinite(probe.loss).all():
                return Finding(FAIL, found + "; see check 4", ADVICE_LOSS_FIRST)
            return Finding(FAIL, found, advice)
        return Finding(
            FAIL,
            f"the loss went {kind} at step {went} of {steps} on one batch (it was {value_text(losses[0])} "
            "at step 1)",
            advice,
        )
    first, last = losses[0], min(losses[-5:])
    found = f"loss {first:.4g} -> {last:.4g} in {steps} steps on one batch"
    if last <= 0.7 * first:
        return Finding(PASS, found)
    lower = "lower the learning rate (optimizer.lr)" + (
        "" if setup.clip is not None else " and add gradient clipping (clip=1.0)"
    )
    if last > 2 * first:
        return Finding(FAIL, found + " (it more than doubled: the steps overshoot)", lower)
    if rose := how_it_rose(losses):  # the steps overshoot: a higher rate would make it worse
        return Finding(FAIL, found + f" (it should fall clearly; {rose})", lower)
    if probe.advised_lower_lr:  # a higher rate here would contradict that check
        return Finding(
            FAIL,
            found + " (it should fall clearly)",
            "check that targets match inputs; the learning-rate advice of checks 5 and 6 comes first",
        )
    return Finding(
        FAIL,
        found + " (it should fall clearly)",
        "raise the learning rate a little, check that targets match inputs",
    )


def how_it_rose(losses: list[float]) -> str:
    """Whether the loss on one batch rose, said in words ("" if not): above its start after a step,
    or at the end well above the lowest it had reached (it fell, then climbed back)."""
    first, last = losses[0], min(losses[-5:])
    highest = max(range(1, len(losses)), key=losses.__getitem__, default=0)
    if losses[highest] > first:
        return f"it rose to {losses[highest]:.4g} at step {highest + 1}"
    lowest = min(range(len(losses)), key=losses.__getitem__)
    if last >= first or last > 1.5 * losses[lowest]:
        return f"it fell to {losses[lowest]:.4g} at step {lowest + 1}, then rose again"
    return ""
