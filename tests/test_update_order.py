"""The order of a window's update, against hand-written loops: gradients unscaled before they are clipped
(loss scaling), and rescaled to the items a model says before they are clipped (accumulation). Each
test has a clip that is active, so clipping at the wrong point changes the weights."""

from dataclasses import dataclass

import torch
from torch import nn

from runner.training.batches import ModelLoss
from runner.training.precision import Precision, resolve_precision
from runner.training.step import Learner, train_step

CPU = torch.device("cpu")
CLIP = 0.05  # well below every norm here: the clip is active on every step


@dataclass
class SaysItsItems:
    loss: torch.Tensor
    num_items_in_batch: torch.Tensor


class MaskedRegression(nn.Module):
    """Targets with holes (NaN): its loss is the mean over the targets that are there, and it says how
    many there were, as a language model says its tokens. The batch cannot show that count."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = nn.Linear(4, 3)

    def summed(self, inputs: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        there = ~targets.isnan()
        errors = (self.linear(inputs) - targets.nan_to_num()).square() * there
        return errors.sum(), there.sum()

    def forward(self, inputs: torch.Tensor, targets: torch.Tensor) -> SaysItsItems:
        total, items = self.summed(inputs, targets)
        return SaysItsItems(total / items, items)


def masked_batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Three micro-batches of different sizes and different shares of holes."""
    generator = torch.Generator().manual_seed(3)
    made = []
    for samples, holes in ((2, 0.0), (5, 0.6), (3, 0.2)):
        inputs = torch.randn(samples, 4, generator=generator)
        targets = torch.randn(samples, 3, generator=generator) * 4
        targets[torch.rand(samples, 3, generator=generator) < holes] = float("nan")
        made.append((inputs, targets))
    return made


def test_a_window_weighed_by_the_items_a_model_says_is_clipped_after_the_rescale_as_a_hand_loop():
    """accumulate=3, loss=from_model with num_items_in_batch, clip active: one big batch's mean over
    every item, clipped, then stepped."""
    window = masked_batches()
    runner_model, hand_model = MaskedRegression(), MaskedRegression()
    optimizer = torch.optim.SGD(runner_model.parameters(), lr=0.5)
    learner = Learner(
        runner_model, ModelLoss(), optimizer, resolve_precision("fp32", CPU), CPU, False, "labels"
    )
    result = train_step(learner, window, clip_norm=CLIP)

    hand_optimizer = torch.optim.SGD(hand_model.parameters(), lr=0.5)
    sums, counts = zip(*(hand_model.summed(inputs, targets) for inputs, targets in window), strict=True)
    loss = torch.stack(sums).sum() / torch.stack(counts).sum()
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(hand_model.parameters(), CLIP)
    hand_optimizer.step()

    assert norm > 10 * CLIP
    for name, tensor in hand_model.state_dict().items():
        torch.testing.assert_close(runner_model.state_dict()[name], tensor, rtol=1e-5, atol=1e-7, msg=name)
    torch.testing.assert_close(result.grad_norm_before_clip, norm, rtol=1e-5, atol=0)
    torch.testing.assert_close(result.loss, loss.detach(), rtol=1e-5, atol=0)


def test_a_loss_scaled_step_unscales_before_it_clips_as_a_hand_loop():
    """One GradScaler (on the CPU, as under precision=amp on a GPU): the gradients are unscaled, then
    clipped, then the scaler steps; an overflow on the third step is skipped and lowers the scale."""
    generator = torch.Generator().manual_seed(2)
    data = [
        (torch.randn(8, 4, generator=generator), torch.randn(8, generator=generator) * 3) for _ in range(4)
    ]
    data[2][0][0, 0] = float("inf")
    torch.manual_seed(0)
    runner_model = nn.Linear(4, 1)
    hand_model = nn.Linear(4, 1)
    hand_model.load_state_dict(runner_model.state_dict())
    loss_fn = lambda outputs, targets: (outputs.squeeze(1) - targets).square().mean()  # noqa: E731

    scaled = Precision("amp", "fp32", "cpu", torch.amp.GradScaler("cpu", init_scale=2.0**10), None)
    optimizer = torch.optim.Adam(runner_model.parameters(), lr=0.01)
    learner = Learner(runner_model, loss_fn, optimizer, scaled, CPU, False, "labels")
    results = [train_step(learner, [batch], clip_norm=CLIP) for batch in data]

    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    hand_optimizer = torch.optim.Adam(hand_model.parameters(), lr=0.01)
    norms = []
    for inputs, targets in data:
        scaler.scale(loss_fn(hand_model(inputs), targets)).backward()
        scaler.unscale_(hand_optimizer)
        norms.append(torch.nn.utils.clip_grad_norm_(hand_model.parameters(), CLIP))
        scaler.step(hand_optimizer)
        scaler.update()
        hand_optimizer.zero_grad()

    for name, tensor in hand_model.state_dict().items():
        assert torch.equal(runner_model.state_dict()[name], tensor), name
    assert scaled.scaler.get_scale() == scaler.get_scale() == 2.0**9  # one overflow, lowered once
    assert [result.applied for result in results] == [True, True, False, True]
    assert float(results[0].grad_norm_before_clip) == float(norms[0]) > 10 * CLIP  # the unscaled norm
