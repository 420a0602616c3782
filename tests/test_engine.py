"""The engine's math equals a hand-written training loop, on tiny models with fixed seeds."""

import copy
import itertools
import math

import pytest
import torch
from conftest import read_scalars
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from runner.data.loading import make_loaders
from runner.observe.writer import TensorBoardLogger
from runner.training.engine import Hooks, Loaders, LoopSettings, fit
from runner.training.metrics import Accuracy
from runner.training.precision import resolve_precision
from runner.training.schedules import build_scheduler
from runner.training.step import Learner
from runner.training.validation import evaluate

CPU = torch.device("cpu")


def tiny_problem(num_samples: int = 64, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(num_samples, 10, generator=generator)
    targets = torch.randn(num_samples, 1, generator=generator) * 50
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 1))
    return TensorDataset(inputs, targets), model


def make_optimizer(name: str, model: nn.Module) -> torch.optim.Optimizer:
    if name == "sgd":
        return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    return torch.optim.Adam(model.parameters(), lr=0.01)


def run_engine(dataset, model, optimizer_name, batch_size, accumulate, clip, log_dir, max_steps=None):
    optimizer = make_optimizer(optimizer_name, model)
    train_loader, val_loader, sampler = make_loaders(
        dataset, dataset, batch_size, shuffle=False, num_workers=0, seed=0, pin_memory=False
    )
    settings = LoopSettings(
        max_steps=max_steps, max_epochs=2, micro_batches_per_step=accumulate, clip_norm=clip,
        log_every_n_steps=1, val_every_n_epochs=None, val_every_n_steps=None, monitor="val/loss",
        monitor_mode="min", metrics={}, on_nonfinite="raise", max_nonfinite_in_a_row=5,
    )  # fmt: skip
    scheduler = build_scheduler(optimizer, "none", 100, 0, 0.0, 1, 1.0)
    logger = TensorBoardLogger(log_dir)
    learner = Learner(model, nn.MSELoss(), optimizer, resolve_precision("fp32", CPU), CPU, False, "labels")
    state = fit(learner, scheduler, Loaders(train_loader, sampler, val_loader), settings, Hooks(logger))
    logger.close()
    return state, optimizer, read_scalars(log_dir)


def run_template(dataset, model, optimizer_name, batch_size, accumulate, clip, epochs=2):
    """A plain hand-written training loop, with the usual ``loss / accumulate`` accumulation."""
    optimizer = make_optimizer(optimizer_name, model)
    loss_fn = nn.MSELoss()
    train_loader = DataLoader(dataset, batch_size=batch_size, shuffle=False)
    losses, grad_norms = [], []
    model.train()
    for _ in range(epochs):
        batches = list(train_loader)
        for start in range(0, len(batches), accumulate):
            optimizer.zero_grad()
            window_loss = torch.zeros(())
            for batch_x, batch_y in batches[start : start + accumulate]:
                pred = model(batch_x)
                loss = loss_fn(pred, batch_y) / accumulate
                loss.backward()
                window_loss += loss.detach()
            if clip is not None:
                grad_norms.append(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=clip))
            optimizer.step()
            losses.append(window_loss.item())
    return losses, grad_norms, optimizer


@pytest.mark.parametrize("optimizer_name", ["sgd", "adam"])
@pytest.mark.parametrize("clip", [None, 1.0])
@pytest.mark.parametrize("accumulate", [1, 4])
def test_engine_equals_the_seed_template(tmp_path, optimizer_name, clip, accumulate):
    dataset, model = tiny_problem()
    template_model = copy.deepcopy(model)
    state, optimizer, scalars = run_engine(dataset, model, optimizer_name, 8, accumulate, clip, tmp_path)
    losses, grad_norms, template_optimizer = run_template(
        dataset, template_model, optimizer_name, 8, accumulate, clip
    )

    assert state.step == len(losses) == 2 * 8 // accumulate
    # Power-of-two accumulation scaling is exact, so the weights match bit for bit.
    for engine_param, template_param in zip(model.parameters(), template_model.parameters(), strict=True):
        assert torch.equal(engine_param, template_param)
    engine_state = optimizer.state_dict()["state"]
    template_state = template_optimizer.state_dict()["state"]
    for index, values in template_state.items():
        for name, value in values.items():
            assert torch.equal(engine_state[index][name], value), (index, name)
    logged_losses = [value for _, value in scalars["train/loss"]]
    assert logged_losses == pytest.approx(losses, rel=1e-6)
    assert [step for step, _ in scalars["train/loss"]] == list(range(1, state.step + 1))
    if clip is not None:
        logged_norms = [value for _, value in scalars["train/grad_norm"]]
        assert logged_norms == pytest.approx([norm.item() for norm in grad_norms], rel=1e-6)
        assert max(value for _, value in scalars["train/grad_norm_clipped"]) <= clip * (1 + 1e-5)


def test_accumulation_equals_the_large_batch(tmp_path):
    """accumulate=4 x batch 8 gives the update of accumulate=1 x batch 32 on the same samples."""
    dataset, model = tiny_problem()
    large_batch_model = copy.deepcopy(model)
    run_engine(dataset, model, "adam", 8, 4, 1.0, tmp_path / "small")
    run_engine(dataset, large_batch_model, "adam", 32, 1, 1.0, tmp_path / "large")
    for accumulated, large in zip(model.parameters(), large_batch_model.parameters(), strict=True):
        torch.testing.assert_close(accumulated, large, rtol=1e-5, atol=1e-6)


def test_short_last_window_is_weighted_by_its_true_size(tmp_path):
    """40 samples, batch 8, accumulate 4: the second window holds one batch and must count as
    the mean over its 8 samples (not a quarter of it), exactly as a batch of 8 would."""
    dataset, model = tiny_problem(num_samples=40)
    reference = copy.deepcopy(model)
    state, _, scalars = run_engine(dataset, model, "sgd", 8, 4, None, tmp_path / "a", max_steps=2)
    assert state.step == 2

    optimizer = make_optimizer("sgd", reference)
    inputs, targets = dataset.tensors
    for window in (slice(0, 32), slice(32, 40)):
        optimizer.zero_grad()
        loss = nn.MSELoss()(reference(inputs[window]), targets[window])
        loss.backward()
        optimizer.step()
    for engine_param, reference_param in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(engine_param, reference_param, rtol=1e-5, atol=1e-6)
    assert scalars["train/loss"][1][1] == pytest.approx(loss.item(), rel=1e-5)


class ModeProbe(nn.Module):
    """Records the mode and grad tracking seen by forward."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 3)
        self.seen: list[tuple[bool, bool]] = []

    def forward(self, inputs):
        self.seen.append((self.training, torch.is_grad_enabled()))
        return self.linear(inputs)


def test_validation_runs_in_eval_without_grad_and_restores_train_mode():
    model = ModeProbe()
    dataset = TensorDataset(torch.randn(10, 4), torch.tensor([0, 1, 2, 0, 1, 2, 0, 1, 2, 0]))
    model.train()
    metrics = evaluate(model, DataLoader(dataset, batch_size=4), nn.CrossEntropyLoss(), CPU,
                       resolve_precision("fp32", CPU), False, {"acc": Accuracy()}, "labels")  # fmt: skip
    assert model.seen == [(False, False)] * 3
    assert model.training
    assert 0 <= metrics["val/acc"] <= 1
    expected = nn.CrossEntropyLoss()(model.linear(dataset.tensors[0]), dataset.tensors[1]).item()
    assert metrics["val/loss"] == pytest.approx(expected, rel=1e-5)


def test_cosine_schedule_with_warmup_is_stepped_per_optimizer_step():
    model = nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    scheduler = build_scheduler(optimizer, "cosine", total_steps=10, warmup_steps=2, min_lr=0.1,
                                step_size=1, gamma=1.0)  # fmt: skip
    lrs = []
    for _ in range(10):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert lrs[:2] == pytest.approx([0.5, 1.0])
    assert lrs[2] == pytest.approx(1.0)
    assert lrs[-1] == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 7 / 8)))
    assert all(a >= b for a, b in itertools.pairwise(lrs[2:]))
