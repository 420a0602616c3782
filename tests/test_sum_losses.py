"""A loss that sums over its samples (reduction="sum", or a model's own that says so) is accumulated as
a sum: a window of micro-batches gives the big batch's gradient; train/loss and val/loss are per
sample."""

import copy

import pytest
import torch
from torch import nn

from runner.config.errors import ConfigError
from runner.training.batches import ModelLoss
from runner.training.precision import resolve_precision
from runner.training.step import Learner, train_step
from runner.training.validation import evaluate

CPU = torch.device("cpu")
FP32 = resolve_precision("fp32", CPU)


def problem():
    generator = torch.Generator().manual_seed(0)
    inputs, targets = torch.randn(32, 6, generator=generator), torch.randn(32, 2, generator=generator)
    torch.manual_seed(0)
    return inputs, targets, nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 2))


def one_step(model, loss_fn, window):
    """One update by SGD: the gradient shows in the weights (lr 1)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    learner = Learner(model, loss_fn, optimizer, FP32, CPU, False, "labels")
    return train_step(learner, window, clip_norm=None)


def pairs(inputs, targets, size):
    return [
        (inputs[start : start + size], targets[start : start + size]) for start in range(0, len(inputs), size)
    ]


def test_a_window_of_a_summed_loss_gives_the_big_batchs_gradient_and_a_per_sample_loss():
    inputs, targets, model = problem()
    summed = nn.MSELoss(reduction="sum")
    windowed, big, by_hand = model, copy.deepcopy(model), copy.deepcopy(model)

    result = one_step(windowed, summed, pairs(inputs, targets, 8))
    whole = one_step(big, summed, [(inputs, targets)])

    # A hand loop that sums: every micro-batch's summed loss backward as it is, one step.
    optimizer = torch.optim.SGD(by_hand.parameters(), lr=1.0)
    for batch_inputs, batch_targets in pairs(inputs, targets, 8):
        summed(by_hand(batch_inputs), batch_targets).backward()
    optimizer.step()

    for window_weight, hand_weight, big_weight in zip(
        windowed.parameters(), by_hand.parameters(), big.parameters(), strict=True
    ):
        assert torch.equal(window_weight, hand_weight)  # bit for bit: the same sums, in the same order
        torch.testing.assert_close(window_weight, big_weight, rtol=1e-5, atol=1e-6)
    expected = summed(problem()[2](inputs), targets).item() / len(inputs)  # per sample
    assert result.loss.item() == pytest.approx(expected, rel=1e-6)
    assert whole.loss.item() == pytest.approx(expected, rel=1e-6)
    assert result.items == whole.items == len(inputs)


class OwnSummedLoss(nn.Module):
    """loss=from_model: a model whose own loss is a sum says so with ``loss_reduction``."""

    loss_reduction = "sum"

    def __init__(self, body: nn.Module) -> None:
        super().__init__()
        self.body = body

    def forward(self, inputs, targets):
        return {"loss": ((self.body(inputs) - targets) ** 2).sum()}


def test_a_models_own_summed_loss_is_accumulated_as_a_sum():
    inputs, targets, body = problem()
    windowed, big = OwnSummedLoss(body), OwnSummedLoss(copy.deepcopy(body))
    result = one_step(windowed, ModelLoss(), pairs(inputs, targets, 8))
    one_step(big, ModelLoss(), [(inputs, targets)])
    for window_weight, big_weight in zip(windowed.parameters(), big.parameters(), strict=True):
        torch.testing.assert_close(window_weight, big_weight, rtol=1e-5, atol=1e-6)
    expected = ((problem()[2](inputs) - targets) ** 2).sum().item() / len(inputs)
    assert result.loss.item() == pytest.approx(expected, rel=1e-6)


def test_validation_reports_a_summed_loss_per_sample():
    inputs, targets, model = problem()
    loader = pairs(inputs, targets, 10)  # batches of 10, 10, 10 and 2
    values = evaluate(model, loader, nn.MSELoss(reduction="sum"), CPU, FP32, False, {}, "labels")
    with torch.no_grad():
        expected = nn.MSELoss(reduction="sum")(model(inputs), targets).item() / len(inputs)
    assert values["val/loss"] == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("reduction", ["none", "summ"])
def test_a_loss_reduction_runner_cannot_train_is_refused_by_name_writing_nothing(
    train_here, tmp_path, reduction
):
    """``loss.reduction=none`` (one loss per sample: no backward) or a typo is one line naming the key,
    the value and what is allowed, before the run directory gets a file."""
    with pytest.raises(ConfigError, match=rf"^loss.reduction={reduction}: .*mean.*sum") as refused:
        train_here("data=regression", "loss=mse", f"+loss.reduction={reduction}", "trainer.max_steps=1")
    assert "\n" not in str(refused.value)
    assert not list((tmp_path / "run").iterdir())
