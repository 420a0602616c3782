"""The weighing (training/weighing.py) called directly: a window's micro-batches, each weighed and sent
backward, give the gradient and the loss of the window's mean, as one big batch of the same items does."""

from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
import torch
from torch import nn

from runner.training.batches import loss_items
from runner.training.memory_agreement import Agreement
from runner.training.weighing import all_processes, item_shares, sample_shares, summed, window_weights

CPU = torch.device("cpu")


@dataclass
class Learner:
    """What weighing reads of a learner, with one process on the CPU."""

    loss_fn: Callable
    plain_model: nn.Module | None = None
    target_key: str = "labels"
    processes: int = 1
    device: torch.device = CPU
    memory: Agreement = field(default_factory=Agreement)


def window(sizes: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(0)
    return [(torch.randn(size, 3), torch.randn(size, 2)) for size in sizes]


def big_batch_gradient(model: nn.Linear, batches: list, loss_fn: Callable) -> tuple[torch.Tensor, list]:
    x = torch.cat([batch[0] for batch in batches])
    y = torch.cat([batch[1] for batch in batches])
    model.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters()]


def test_sample_shares_weigh_each_micro_batch_by_its_samples() -> None:
    assert sample_shares([2, 3, 5], 1) == [0.2, 0.3, 0.5]
    assert sample_shares([7], 1) == [1.0]  # one micro-batch, one process: no weight


def test_item_shares_sum_to_the_process_count() -> None:
    assert item_shares([1, 3], 4, 1) == [0.25, 0.75]
    assert sum(item_shares([3, 3, 3], 9, 1)) == pytest.approx(1.0)
    assert item_shares([0, 0], 0, 1) == [0.0, 0.0]  # no items at all: no division by zero
    on_device = item_shares([torch.tensor(1), torch.tensor(3)], torch.tensor(4), 1)
    assert [float(share) for share in on_device] == [0.25, 0.75]


def test_with_one_process_the_sums_across_processes_are_the_value_itself() -> None:
    assert all_processes(5, 1) == 5
    value = torch.tensor(2.5)
    assert all_processes(value, 1) is value
    assert summed(value, 1) is value


def test_micro_batches_weighed_by_their_samples_give_the_windows_mean_and_its_gradient() -> None:
    torch.manual_seed(1)
    model = nn.Linear(3, 2)
    batches = window([2, 3, 5])
    loss_fn = nn.MSELoss()
    expected_loss, expected_grads = big_batch_gradient(model, batches, loss_fn)

    model.zero_grad()
    weights = window_weights(Learner(loss_fn), batches, loss_items)
    assert weights.items == [4, 6, 10]  # mean squared error averages over every target element
    assert weights.shares == [0.2, 0.3, 0.5]
    for index, (x, y) in enumerate(batches):
        weights.weigh(index, loss_fn(model(x), y), None).backward()

    for grad, expected in zip([p.grad for p in model.parameters()], expected_grads, strict=True):
        torch.testing.assert_close(grad, expected)
    loss, items = weights.window_loss()
    torch.testing.assert_close(loss, expected_loss)
    assert items == 20.0
    assert weights.rescale() is None  # no model said its items: nothing to rescale


def test_one_micro_batch_on_one_process_goes_backward_unweighed() -> None:
    model = nn.Linear(3, 2)
    ((x, y),) = window([4])
    weights = window_weights(Learner(nn.MSELoss()), [(x, y)], loss_items)
    loss = nn.functional.mse_loss(model(x), y)
    assert weights.weigh(0, loss, None) is loss  # bit-identical: no multiply


def test_a_summed_loss_goes_backward_as_it_is_and_logs_per_sample() -> None:
    model = nn.Linear(3, 2)
    batches = window([2, 3])
    loss_fn = nn.MSELoss(reduction="sum")
    weights = window_weights(Learner(loss_fn), batches, loss_items)
    assert weights.sums and weights.shares == [1.0, 1.0]
    losses = [loss_fn(model(x), y) for x, y in batches]
    assert all(weights.weigh(i, loss, None) is loss for i, loss in enumerate(losses))
    loss, samples = weights.window_loss()
    torch.testing.assert_close(loss, (losses[0] + losses[1]).detach() / 5)
    assert samples == 5.0


def test_items_a_model_says_are_rescaled_to_the_mean_over_every_item() -> None:
    """A model's own loss averages over the items it says (here a mask the batches cannot see): each
    micro-batch weighed against the first's count, then the gradients times :meth:`rescale`."""
    torch.manual_seed(2)
    model = nn.Linear(3, 1)
    batches = window([4, 4, 4])
    masks = [torch.tensor([1, 1, 0, 0]), torch.tensor([1, 1, 1, 1]), torch.tensor([1, 0, 0, 0])]

    def own_loss(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return (model(x).squeeze(1) ** 2 * mask).sum() / mask.sum()

    x_all, mask_all = torch.cat([b[0] for b in batches]), torch.cat(masks)
    model.zero_grad()
    expected = own_loss(x_all, mask_all)
    expected.backward()
    expected_grads = [p.grad.clone() for p in model.parameters()]

    model.zero_grad()
    weights = window_weights(Learner(nn.MSELoss()), batches, lambda batch, *_: len(batch[0]))
    for index, ((x, _), mask) in enumerate(zip(batches, masks, strict=True)):
        weights.weigh(index, own_loss(x, mask), int(mask.sum())).backward()
    rescale = weights.rescale()
    assert rescale == pytest.approx(2 / 7)  # the first's 2 items over the window's 7
    for p, want in zip(model.parameters(), expected_grads, strict=True):
        torch.testing.assert_close(p.grad * rescale, want)
    loss, items = weights.window_loss()
    torch.testing.assert_close(loss, expected.detach())
    assert items == 7.0
