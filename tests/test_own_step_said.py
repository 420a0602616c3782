"""A step the model writes (``training_step``) is never ignored, and one that trains nothing is said:
with the run's one optimizer the model's step runs (as Lightning runs a LightningModule's); a step that
updates no optimizer, updates without a backward, or names an optimizer the config has not, stops in
one line naming the optimizers; doctor's update check runs the model's own step. Models:
``tests/plugins/own_steps.py``."""

import importlib
import logging

import pytest
import torch
from conftest import PLUGINS, TINY, composed, read_scalars
from hydra.utils import instantiate

from runner.checkpoint.files import CheckpointError
from runner.cli.main import main
from runner.config.errors import UserError
from runner.experiment.optimizers import chosen_step
from runner.experiment.setup import build_optimizer, prepare
from runner.tools.doctor import FAIL, PASS, Setup, run_checks
from runner.tools.lr_find import find_lr
from runner.training.precision import resolve_precision
from runner.training.step import Learner

CPU = torch.device("cpu")

TWO = tuple(
    f"+optimizers.{part}.{key}={value}"
    for part in ("body", "head")
    for key, value in (("params", f"{part}.*"), ("_target_", "torch.optim.SGD"), ("lr", 0.1))
)
NEVER_UPDATES = (
    "training_step updated no optimizer in a step, so it trains nothing; call step.update(name) after "
    "step.backward(loss, name) for at least one of "
)


def weights(run_dir):
    return torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)["model_state_dict"]


def test_a_models_own_step_with_the_runs_one_optimizer_runs_and_trains_as_the_default_step(
    train_here, tmp_path, caplog
):
    """Written as runner's default step (backward, update), the model's step gives the same weights bit
    for bit; its own scalar in the logs shows that it ran."""
    own = train_here(*TINY, "model._target_=own_steps.OwnStep", run_dir=tmp_path / "own")
    plan = "\n".join(record.getMessage() for record in caplog.records)
    assert "step             the model's training_step(batch, step), updating by name: optimizer" in plan
    default = train_here(*TINY, "model._target_=own_steps.TwoLayers", run_dir=tmp_path / "default")
    scalars = read_scalars(own)
    assert [value for _, value in scalars["train/ran_own_step"]] == [1.0] * 4
    assert {"train/lr/optimizer", "train/grad_norm/optimizer", "train/grad_norm"} <= set(scalars)
    saved = torch.load(own / "checkpoints" / "last.pt", weights_only=True)["optimizer_state_dict"]
    assert list(saved) == ["optimizer"]
    assert "train/ran_own_step" not in read_scalars(default)
    assert scalars["train/loss"] == read_scalars(default)["train/loss"]
    for name, tensor in weights(default).items():
        assert torch.equal(weights(own)[name], tensor), name


@pytest.mark.parametrize(
    ("model", "optimizers", "expected"),
    [
        ("NeverUpdates", (), f"NeverUpdates.{NEVER_UPDATES}optimizer"),
        ("NeverUpdates", TWO, f"NeverUpdates.{NEVER_UPDATES}body, head"),
        ("UpdatesWithoutBackward", (), "training_step called step.update('optimizer') with no "
         "step.backward(loss, 'optimizer') before it in this step, so the update would apply no gradient"),
        ("NamesAnotherOptimizer", TWO, "the model's training_step named the optimizer 'generator' (in "
         "step.backward or step.update), and there is none of that name; the config's optimizers are "
         "body, head"),
    ],
)  # fmt: skip
def test_a_step_that_trains_nothing_stops_in_one_line_naming_the_optimizer(
    tmp_path, monkeypatch, capsys, model, optimizers, expected
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(PLUGINS))
    with pytest.raises(SystemExit) as exited:
        main(
            [
                "train",
                *TINY,
                f"model._target_=own_steps.{model}",
                *optimizers,
                f"hydra.run.dir={tmp_path / 'run'}",
            ]
        )
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"runner: error: {expected}"), err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_a_step_that_updates_one_of_two_optimizers_in_a_step_is_not_refused(monkeypatch):
    """The body updated every step and the head every other (WGAN's n_critic): both train."""
    monkeypatch.syspath_prepend(str(PLUGINS))
    model = importlib.import_module("own_steps").HeadEveryOtherStep((1, 8, 8), 10)
    optimizer = build_optimizer(instantiate, composed(*TINY, *TWO), model)
    learner = Learner(model, None, optimizer, resolve_precision("fp32", CPU), CPU, False, "labels",
                      step=chosen_step(optimizer))  # fmt: skip
    batch = (torch.randn(4, 1, 8, 8), torch.tensor([0, 1, 2, 3]))
    body, head = model.body.weight.detach().clone(), model.head.weight.detach().clone()
    learner.step.train(learner, [batch], None)
    assert torch.equal(model.head.weight, head) and not torch.equal(model.body.weight, body)
    learner.step.train(learner, [batch], None)
    assert not torch.equal(model.head.weight, head)


@pytest.mark.parametrize(
    ("model", "status", "found"),
    [("OwnStep", PASS, "4 of 4 trainable tensors changed (lr 0.001)"),
     ("NeverUpdates", FAIL, f"NeverUpdates.{NEVER_UPDATES}optimizer"),
     ("FailsAfterItsUpdate", FAIL, "the model's training_step raised RuntimeError: a bug after the update")],
)  # fmt: skip
def test_doctors_update_check_runs_the_models_own_step(monkeypatch, caplog, model, status, found):
    """Its trial step is undone whatever the step did: the model leaves doctor as it came."""
    monkeypatch.syspath_prepend(str(PLUGINS))
    caplog.set_level(logging.WARNING)
    config = composed(*TINY, f"model._target_=own_steps.{model}")
    setup = Setup.of(
        config,
        prepare(config, instantiate, config.seed),
        lambda model: build_optimizer(instantiate, config, model),
    )
    before = {name: tensor.clone() for name, tensor in setup.model.state_dict().items()}
    results = run_checks(setup)
    assert results[5].status == status, results[5]
    assert results[5].found.startswith(found), results[5]
    for name, tensor in setup.model.state_dict().items():
        assert torch.equal(tensor, before[name]), name


def test_a_checkpoint_of_runners_own_step_is_refused_by_a_model_that_now_writes_its_step(
    train_here, monkeypatch
):
    """A run saved while its model had no ``training_step`` (or while runner ignored it), resumed once it
    has one: its optimizer's state is one optimizer's, not by name, and the resume stops in one line."""
    run_dir = train_here(*TINY, "model._target_=own_steps.TwoLayers", "checkpoint.every_n_steps=2")
    own_steps = importlib.import_module("own_steps")
    monkeypatch.setattr(own_steps.TwoLayers, "training_step", own_steps.OwnStep.training_step, raising=False)
    refused = (
        r"the optimizer state does not fit \(it holds one optimizer's state, saved by runner's own step; "
        r"this run's model writes its own step"
    )
    with pytest.raises(CheckpointError, match=refused):
        train_here(
            *TINY, "model._target_=own_steps.TwoLayers", "trainer.max_steps=6", "resume=auto", run_dir=run_dir
        )


def test_lr_find_runs_a_models_own_step_with_one_optimizer_and_refuses_several(monkeypatch):
    """One optimizer: one loss to choose its rate by, the curve of runner's own step; several: one line."""
    monkeypatch.syspath_prepend(str(PLUGINS))
    own_steps = importlib.import_module("own_steps")
    generator = torch.Generator().manual_seed(0)
    batches = [(torch.randn(8, 1, 8, 8, generator=generator), torch.arange(8) % 10) for _ in range(4)]

    def curve(model_class, *overrides):
        torch.manual_seed(0)
        model, config = model_class((1, 8, 8), 10), composed(*TINY, *overrides)
        precision = resolve_precision("fp32", CPU)
        return find_lr(
            model, lambda model: build_optimizer(instantiate, config, model), torch.nn.CrossEntropyLoss(),
            batches, CPU, precision, config.clip, "labels", num_steps=20,
        )  # fmt: skip

    own, default = curve(own_steps.OwnStep), curve(own_steps.TwoLayers)
    assert own.lrs == default.lrs and own.losses == default.losses and len(own.lrs) >= 10
    with pytest.raises(UserError, match=r"^lr_find: optimizers body, head each have a rate"):
        curve(own_steps.OwnStep, *TWO)
