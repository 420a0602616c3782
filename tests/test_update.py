"""``update`` (training/update.py) called directly on a tiny linear model: the end of a window as a
hand-written loop ends it (unscale, clip, the non-finite guard, the optimizer's step, zero-grad)."""

import pytest
import torch
from torch import nn

from runner.training.update import clipped_norm, step_if_finite, update

OFF = torch.amp.GradScaler("cpu", enabled=False)


def model_with_grads(seed: int = 0, times: float = 1.0) -> nn.Linear:
    """A 3-to-2 linear model whose gradients are those of a fixed mean-squared loss, times ``times``."""
    torch.manual_seed(seed)
    model = nn.Linear(3, 2)
    x, y = torch.randn(5, 3), torch.randn(5, 2)
    (nn.functional.mse_loss(model(x), y) * times).backward()
    return model


def state_copy(optimizer: torch.optim.Optimizer) -> list[dict[str, torch.Tensor]]:
    parameters = optimizer.param_groups[0]["params"]
    return [{key: value.clone() for key, value in optimizer.state[p].items()} for p in parameters]


def test_clip_scales_the_gradients_as_clip_grad_norm_does_and_returns_the_norm_before() -> None:
    model = model_with_grads()
    reference = model_with_grads()
    unclipped = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])
    assert unclipped > 0.1  # the clip below bites
    expected_norm = torch.nn.utils.clip_grad_norm_(reference.parameters(), 0.1)
    torch.optim.SGD(reference.parameters(), lr=1.0).step()

    done = update(torch.optim.SGD(model.parameters(), lr=1.0), list(model.parameters()), OFF, 0.1, False)

    assert torch.equal(done.norm, expected_norm)
    assert torch.equal(done.norm, unclipped)
    for mine, theirs in zip(model.parameters(), reference.parameters(), strict=True):
        assert torch.equal(mine, theirs)
    assert done.applied is True  # no guard asked: applied without a decision


def test_without_a_clip_the_step_is_the_optimizers_own() -> None:
    model = model_with_grads()
    reference = model_with_grads()
    torch.optim.SGD(reference.parameters(), lr=0.5).step()
    update(torch.optim.SGD(model.parameters(), lr=0.5), list(model.parameters()), OFF, None, False)
    for mine, theirs in zip(model.parameters(), reference.parameters(), strict=True):
        assert torch.equal(mine, theirs)


def test_the_gradients_are_cleared_after_the_step() -> None:
    model = model_with_grads()
    update(torch.optim.SGD(model.parameters(), lr=0.1), list(model.parameters()), OFF, 1.0, True)
    assert all(p.grad is None for p in model.parameters())


def test_a_non_finite_norm_leaves_weights_and_optimizer_state_bit_for_bit() -> None:
    model = model_with_grads()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    optimizer.step()  # state to keep: moments and a step count
    before_weights = [p.detach().clone() for p in model.parameters()]
    before_state = state_copy(optimizer)
    model.weight.grad.fill_(1.0)
    model.bias.grad[0] = float("inf")

    done = update(optimizer, list(model.parameters()), OFF, 1.0, True)

    assert isinstance(done.applied, torch.Tensor) and not done.applied  # decided on the device
    assert not torch.isfinite(done.norm)
    for weight, before in zip(model.parameters(), before_weights, strict=True):
        assert torch.equal(weight, before)
    for now, before in zip(state_copy(optimizer), before_state, strict=True):
        assert now.keys() == before.keys()
        for key in now:
            assert torch.equal(now[key], before[key]), key
    assert all(p.grad is None for p in model.parameters())


def test_a_finite_norm_with_the_guard_steps_as_without_it() -> None:
    model = model_with_grads()
    reference = model_with_grads()
    torch.optim.AdamW(reference.parameters(), lr=0.1).step()
    done = update(torch.optim.AdamW(model.parameters(), lr=0.1), list(model.parameters()), OFF, None, True)
    assert bool(done.applied)
    for mine, theirs in zip(model.parameters(), reference.parameters(), strict=True):
        assert torch.equal(mine, theirs)


def test_a_skipped_first_step_leaves_the_state_it_created_at_zeros() -> None:
    model = model_with_grads()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    before = [p.detach().clone() for p in model.parameters()]
    step_if_finite(optimizer, list(model.parameters()), torch.tensor(False))
    assert all(torch.equal(p, b) for p, b in zip(model.parameters(), before, strict=True))
    for p in model.parameters():
        assert torch.count_nonzero(optimizer.state[p]["exp_avg"]) == 0
        assert torch.count_nonzero(optimizer.state[p]["exp_avg_sq"]) == 0


def test_loss_scaling_is_undone_before_the_clip_and_the_norm() -> None:
    reference = model_with_grads()
    expected_norm = torch.nn.utils.clip_grad_norm_(reference.parameters(), 0.1)
    torch.optim.SGD(reference.parameters(), lr=1.0).step()
    # The same gradients as a scaled loss gives them: times a power of two (exact).
    scaled = model_with_grads(times=2.0**10)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    scaler.scale(torch.zeros((), requires_grad=True))  # the scaler starts its scale on first use

    done = update(torch.optim.SGD(scaled.parameters(), lr=1.0), list(scaled.parameters()), scaler, 0.1, True)

    assert torch.equal(done.norm, expected_norm)
    for mine, theirs in zip(scaled.parameters(), reference.parameters(), strict=True):
        assert torch.equal(mine, theirs)


def test_rescale_multiplies_the_gradients_before_their_norm_and_the_clip() -> None:
    model = model_with_grads()
    reference = model_with_grads(times=0.5)
    expected_norm = torch.nn.utils.clip_grad_norm_(reference.parameters(), 0.1)
    torch.optim.SGD(reference.parameters(), lr=1.0).step()
    done = update(torch.optim.SGD(model.parameters(), lr=1.0), list(model.parameters()), OFF, 0.1, False, 0.5)
    assert torch.equal(done.norm, expected_norm)
    for mine, theirs in zip(model.parameters(), reference.parameters(), strict=True):
        assert torch.equal(mine, theirs)


@pytest.mark.parametrize(("norm", "clip", "expected"), [(4.0, None, 4.0), (4.0, 8.0, 4.0), (4.0, 1.0, 1.0)])
def test_clipped_norm_is_the_norm_after_the_clip(norm: float, clip: float | None, expected: float) -> None:
    assert clipped_norm(norm, clip) == pytest.approx(expected, rel=1e-6)


def test_clipped_norm_agrees_with_the_gradients_clip_grad_norm_leaves() -> None:
    model = model_with_grads()
    before = float(torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1))
    after = float(torch.nn.utils.get_total_norm([p.grad for p in model.parameters()]))
    assert clipped_norm(before, 0.1) == pytest.approx(after, rel=1e-6)
