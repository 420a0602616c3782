"""Which step a learner trains with, chosen once where its optimizers are built
(``experiment/optimizers.py``: ``chosen_step``), and the agreeing step of several processes under DDP
with ``on_oom=split`` (``training/agreeing_step.py``), here on one process: its math is ``train_step``'s
and ``evaluate``'s, and an out-of-memory error in its window or its validation goes through the
agreement (every process learns it, named by rank) before the split. Under torchrun: ``test_oom.py``."""

import importlib
import logging

import pytest
import torch
from conftest import PLUGINS, TINY, composed
from hydra.utils import instantiate
from torch import nn

from runner.checkpoint.state import TrainState
from runner.experiment.optimizers import chosen_step
from runner.experiment.parallel import spread_model
from runner.experiment.setup import build_optimizer
from runner.training.agreeing_step import agreeing_step
from runner.training.distributed import ProcessInfo
from runner.training.manual_step import MODELS_STEP
from runner.training.memory_agreement import Agreement
from runner.training.oom import cut, evaluate_within_memory, step_within_memory
from runner.training.precision import resolve_precision
from runner.training.step import RUNNERS_STEP, Learner, train_step
from runner.training.validation import evaluate

CPU = torch.device("cpu")
FP32 = resolve_precision("fp32", CPU)


class Normed(nn.Module):
    """A BatchNorm in front (buffers the agreeing step hands over from rank 0); runs out of memory on
    more than ``limit`` samples at once."""

    def __init__(self, limit: int | None = None):
        super().__init__()
        torch.manual_seed(0)
        self.norm, self.linear, self.limit = nn.BatchNorm1d(4), nn.Linear(4, 3), limit

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if self.limit is not None and len(inputs) > self.limit:
            raise torch.OutOfMemoryError("simulated")
        return self.linear(self.norm(inputs))


def learner_of(model: nn.Module, agreeing: bool) -> Learner:
    step = agreeing_step(Agreement(0, enabled=True), model) if agreeing else RUNNERS_STEP
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return Learner(model, nn.CrossEntropyLoss(), optimizer, FP32, CPU, False, "labels", step=step)


def batches(count: int, size: int) -> list:
    generator = torch.Generator().manual_seed(1)
    return [(torch.randn(size, 4, generator=generator), torch.randint(0, 3, (size,), generator=generator))
            for _ in range(count)]  # fmt: skip


def same_state(first: nn.Module, second: nn.Module) -> bool:
    """Weights and buffers (BatchNorm's running statistics), bit for bit."""
    pairs = zip(first.state_dict().values(), second.state_dict().values(), strict=True)
    return all(torch.equal(a, b) for a, b in pairs)


def test_the_agreeing_step_trains_and_validates_as_the_plain_step_and_validation():
    plain, agreeing = learner_of(Normed(), agreeing=False), learner_of(Normed(), agreeing=True)
    for window in [batches(2, 4), batches(3, 5), batches(1, 6)]:  # accumulated windows, and one alone
        expected = train_step(plain, window, clip_norm=1.0)
        result = agreeing.step.train(agreeing, window, 1.0)
        assert torch.equal(result.loss, expected.loss)
        assert torch.equal(result.grad_norm_before_clip, expected.grad_norm_before_clip)
    assert same_state(plain.model, agreeing.model)
    val = batches(3, 4)
    assert agreeing.step.evaluate(agreeing.model, val, agreeing.loss_fn, CPU, FP32, False, {}, "labels") == (
        evaluate(plain.model, val, plain.loss_fn, CPU, FP32, False, {}, "labels")
    )


def test_out_of_memory_in_the_agreeing_window_is_agreed_on_then_split_with_the_same_math(caplog):
    """The error goes through the agreement (the line names the rank every process learnt it from),
    and the window redone at half the size ends as the configured one."""
    caplog.set_level(logging.WARNING)
    split, configured = learner_of(Normed(limit=4), agreeing=True), learner_of(Normed(), agreeing=False)
    window, state = batches(1, 8), TrainState()
    step_within_memory(split, window, state, "split", lambda *_: None,
                       lambda parts: split.step.train(split, parts, None))  # fmt: skip
    train_step(configured, cut(window[0], 4, "labels"), clip_norm=None)
    assert [r.getMessage() for r in caplog.records] == [
        "out of memory at micro-batch 8 on rank 0: continuing with 4 x 2 per step"
    ]
    assert state.micro_batch_size == 4
    assert same_state(split.model, configured.model)
    caplog.clear()
    state.micro_batch_size = None
    values = evaluate_within_memory(split, batches(2, 8), state, "split", lambda loader: split.step.evaluate(
        split.model, loader, split.loss_fn, CPU, FP32, False, {}, "labels"
    ))  # fmt: skip
    assert [r.getMessage() for r in caplog.records] == [
        "out of memory in validation at batch 8 on rank 0: continuing with 4"
    ]
    whole = evaluate(configured.model, batches(2, 8), configured.loss_fn, CPU, FP32, False, {}, "labels")
    assert values["val/loss"] == pytest.approx(whole["val/loss"], rel=1e-6)  # halves summed in another order


def test_the_step_is_chosen_where_the_optimizers_are_built(monkeypatch):
    """A model with a training_step trains with it (its optimizers are named); any other with runner's
    step, agreeing on out of memory only with several processes under DDP and on_oom=split."""
    monkeypatch.syspath_prepend(str(PLUGINS))
    own = importlib.import_module("own_steps").OwnStep((1, 8, 8), 10)
    assert chosen_step(build_optimizer(instantiate, composed(*TINY), own)) is MODELS_STEP
    plain = Normed()
    optimizer = build_optimizer(instantiate, composed(*TINY), plain)
    assert chosen_step(optimizer) is RUNNERS_STEP
    one = spread_model(composed(*TINY, "on_oom=split"), plain, plain, CPU, "fp32", ProcessInfo())
    assert chosen_step(optimizer, one) is RUNNERS_STEP
    two = ProcessInfo(rank=1, world_size=2)
    agreeing = chosen_step(
        optimizer, spread_model(composed(*TINY, "on_oom=split"), plain, plain, CPU, "fp32", two)
    )
    assert agreeing.agreement == Agreement(rank=1, enabled=True) and not agreeing.writes_own
    assert Learner(plain, nn.MSELoss(), optimizer, FP32, CPU, False, "labels").step is RUNNERS_STEP
