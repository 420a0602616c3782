"""A step the model writes (training/manual_step.py), on a tiny two-part model against hand loops:
one GradScaler for both optimizers, each unscaled before its clip, an overflow skipped by both and
the scale lowered once; the non-finite guard per optimizer."""

import copy

import torch
from torch import nn

from runner.experiment.parts import matching
from runner.training.batches import ModelLoss
from runner.training.manual_step import manual_train_step
from runner.training.named_optimizers import NamedOptimizers, NamedSchedulers
from runner.training.precision import Precision
from runner.training.schedules import ConstantLR
from runner.training.step import Learner

CPU = torch.device("cpu")


class TwoParts(nn.Module):
    """Part ``a`` learns to shrink its output, part ``b`` to regress the targets from ``a``'s."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 1)

    def training_step(self, batch, step):
        inputs, targets = batch
        loss_a = self.a(inputs).square().mean()
        step.backward(loss_a, "a")
        step.update("a")
        loss_b = (self.b(self.a(inputs)).squeeze(1) - targets).square().mean()
        step.backward(loss_b, "b")
        step.update("b")
        return {"loss_a": loss_a, "loss_b": loss_b}


def batches(count: int, inf_at: int | None = None, nan_target_at: int | None = None) -> list:
    generator = torch.Generator().manual_seed(1)
    made = []
    for index in range(count):
        inputs, targets = torch.randn(8, 4, generator=generator), torch.randn(8, generator=generator)
        if index == inf_at:
            inputs[0, 0] = float("inf")
        if index == nan_target_at:
            targets[0] = float("nan")
        made.append((inputs, targets))
    return made


def learner_of(model: TwoParts, precision: Precision, clip_a: float | None) -> Learner:
    optimizers = {name: torch.optim.Adam(getattr(model, name).parameters(), lr=0.01) for name in ("a", "b")}
    named = NamedOptimizers(optimizers, {"a": clip_a, "b": None}, {"a": {}, "b": {}})
    return Learner(model, ModelLoss(), named, precision, CPU, False, "labels")


def test_one_scaler_unscales_each_optimizer_before_its_clip_and_skips_an_overflow_as_a_hand_loop():
    runner_model, hand_model = TwoParts(), TwoParts()
    scaled = Precision("amp", "fp32", "cpu", torch.amp.GradScaler("cpu", init_scale=2.0**8), None)
    learner = learner_of(runner_model, scaled, clip_a=0.1)
    data = batches(4, inf_at=2)
    results = [manual_train_step(learner, [batch], clip_norm=None) for batch in data]

    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**8)
    opt_a = torch.optim.Adam(hand_model.a.parameters(), lr=0.01)
    opt_b = torch.optim.Adam(hand_model.b.parameters(), lr=0.01)
    for inputs, targets in data:
        loss_a = hand_model.a(inputs).square().mean()
        scaler.scale(loss_a).backward(inputs=list(hand_model.a.parameters()))
        scaler.unscale_(opt_a)
        torch.nn.utils.clip_grad_norm_(hand_model.a.parameters(), 0.1)
        scaler.step(opt_a)
        opt_a.zero_grad()
        loss_b = (hand_model.b(hand_model.a(inputs)).squeeze(1) - targets).square().mean()
        scaler.scale(loss_b).backward(inputs=list(hand_model.b.parameters()))
        scaler.unscale_(opt_b)
        scaler.step(opt_b)
        opt_b.zero_grad()
        scaler.update()
    for name, tensor in hand_model.state_dict().items():
        assert torch.equal(runner_model.state_dict()[name], tensor), name
    assert scaled.scaler.get_scale() == scaler.get_scale() == 2.0**7  # one overflow, lowered once
    assert [result.applied for result in results] == [True, True, False, True]
    assert float(results[0].scalars["train/grad_norm_clipped/a"]) <= 0.1 + 1e-6
    assert float(results[0].scalars["train/grad_norm/a"]) > 0.1


def test_the_guard_skips_only_the_update_whose_gradient_is_not_finite():
    model = TwoParts()
    learner = learner_of(
        model, Precision("fp32", "fp32", "cpu", torch.amp.GradScaler("cpu", enabled=False)), None
    )
    (batch,) = batches(1, nan_target_at=0)
    before = copy.deepcopy(model.state_dict())
    result = manual_train_step(learner, [batch], clip_norm=None, check_finite=True)
    assert not result.applied
    assert torch.equal(model.b.weight, before["b.weight"])  # b's NaN gradient: its update skipped
    assert not torch.equal(model.a.weight, before["a.weight"])  # a's finite one applied
    assert not torch.isfinite(result.grad_norm_before_clip)
    assert all(parameter.grad is None for parameter in model.parameters())  # nothing carried over


def test_named_schedulers_and_parts_by_pattern():
    model = TwoParts()
    chosen = matching(model, ["b.*", "a.bias"], "optimizers.x")
    assert [name for name, _ in chosen] == ["a.bias", "b.weight", "b.bias"]  # in the model's order
    schedulers = NamedSchedulers({"a": ConstantLR(), "b": ConstantLR()})
    schedulers.step()
    assert schedulers.state_dict() == {"a": {}, "b": {}}
