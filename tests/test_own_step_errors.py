"""A step the model writes (``training_step``) that a user gets wrong is said in one line, exit 2: a step
of one argument or a LightningModule's step as it is before anything is written; at its first window
(the run has begun: its folder holds its record, no checkpoint) an update called on a window's earlier
micro-batch only (it would never apply) and a returned loss that is complex, on the meta device or
without a gradient. A NaN or Inf loss returned beside finite updates is handled as ``on_nonfinite`` says.
Models: ``tests/plugins/hostile_steps.py``."""

import logging

import pytest
from conftest import PLUGINS, TINY, composed, read_scalars, train_refused
from hydra.utils import instantiate

from runner.experiment.setup import build_optimizer, prepare
from runner.tools.doctor import FAIL, PASS, Setup, run_checks

NEVER_APPLIES = (
    "UpdatesOnOneMicroBatch.training_step called step.update('optimizer') on micro-batch {on} of a window "
    "of {window} (accumulate={window}) but not on its last, so that update never applies"
)


def refused(tmp_path, monkeypatch, capsys, *overrides: str) -> str:
    """``runner train`` in this process: the one line it stopped with. Refused before the run began,
    nothing is written; at its first step, no checkpoint."""
    err = train_refused(tmp_path, monkeypatch, capsys, *overrides)
    run_dir = tmp_path / "run"
    assert not run_dir.exists() or list((run_dir / "checkpoints").iterdir()) == []
    return err


@pytest.mark.parametrize(("on", "window"), [(1, 2), (1, 3), (2, 3)])
def test_an_update_on_an_earlier_micro_batch_only_stops_the_run_naming_it(
    tmp_path, monkeypatch, capsys, on, window
):
    err = refused(
        tmp_path, monkeypatch, capsys, "model._target_=hostile_steps.UpdatesOnOneMicroBatch",
        f"+model.update_on={on - 1}", f"+model.window={window}", f"accumulate={window}",
    )  # fmt: skip
    assert err.startswith(NEVER_APPLIES.format(on=on, window=window)), err


def test_an_update_on_the_last_micro_batch_only_trains(train_here):
    """The documented shape: an update called on the window's last micro-batch applies."""
    run_dir = train_here(
        *TINY, "model._target_=hostile_steps.UpdatesOnOneMicroBatch", "+model.update_on=1", "accumulate=2"
    )
    assert [step for step, _ in read_scalars(run_dir)["train/loss"]] == [1, 2, 3, 4]


@pytest.mark.parametrize(
    ("model", "expected"),
    [("ReturnsComplex", "training_step returned a complex tensor (torch.complex64) as 'loss'; it must "
      "return a scalar loss tensor or a dict of named scalar loss tensors"),
     ("ReturnsMeta", "training_step returned a tensor on the meta device as 'loss'; it must return"),
     ("ReturnsDetached", "training_step returned 'loss' with no gradient (requires_grad=False); it must "
      "return a scalar loss tensor or a dict of named scalar loss tensors (logged as train/<name>), among "
      "them a loss computed by the step"),
     ("ReturnsAFloatBeside", "training_step returned a float as 'lr_hint'; it must return a scalar loss "
      "tensor or a dict of named scalar loss tensors"),
     ("ReturnsAVector", "training_step returned a tensor of shape (1,); it must return a scalar loss tensor"),
     ("ReturnsNothing", "training_step returned None; it must return a scalar loss tensor"),
     ("OneArgument", "OneArgument.training_step(batch) cannot be called as runner calls it, "
      "training_step(batch, step)"),
     ("LightningStyle", "LightningStyle.training_step(batch, batch_idx) is a LightningModule's step, and "
      "runner's is not Lightning's: runner calls training_step(batch, step)"),
     ("LightningOneArgument", "LightningOneArgument.training_step(batch) is a LightningModule's step, and "
      "runner's is not Lightning's")],
)  # fmt: skip
def test_a_step_runner_cannot_take_is_one_line_naming_what_it_is_and_what_is_allowed(
    tmp_path, monkeypatch, capsys, model, expected
):
    err = refused(tmp_path, monkeypatch, capsys, f"model._target_=hostile_steps.{model}")
    assert err.startswith(expected), err
    if model in ("OneArgument", "LightningStyle", "LightningOneArgument"):  # as the optimizer is built
        assert not (tmp_path / "run").exists()
    if model.startswith("Lightning"):
        assert "docs/coming-from.md" in err


def test_a_step_that_touches_no_optimizer_points_to_lightnings_signature(tmp_path, monkeypatch, capsys):
    """A Lightning step whose second argument has another name: it runs, calls nothing of ``step``."""
    err = refused(tmp_path, monkeypatch, capsys, "model._target_=hostile_steps.LightningStepRenamed")
    assert (
        "it called neither step.backward nor step.update: runner calls training_step(batch, step), not "
        "Lightning's training_step(batch, batch_idx) (see docs/coming-from.md)"
    ) in err, err


def test_a_nonfinite_loss_beside_a_finite_update_stops_the_run_under_raise(tmp_path, monkeypatch, capsys):
    err = refused(tmp_path, monkeypatch, capsys, "model._target_=hostile_steps.ReturnsNonFinite")
    assert err.startswith("non-finite loss returned by training_step (other nan) at optimizer step 2 "), err


def test_a_nonfinite_loss_that_made_its_gradient_nonfinite_is_said_as_the_gradient(
    tmp_path, monkeypatch, capsys
):
    """Its update was skipped for the gradient (the loss check does not claim it was applied)."""
    err = refused(tmp_path, monkeypatch, capsys, "model._target_=hostile_steps.BackwardsANan")
    assert err.startswith("non-finite gradient (total norm nan) at optimizer step 2 "), err
    assert "the update was not applied" in err


def test_a_nonfinite_loss_beside_a_finite_update_is_a_skipped_step_under_skip(train_here):
    run_dir = train_here(*TINY, "model._target_=hostile_steps.ReturnsNonFinite", "on_nonfinite=skip")
    assert read_scalars(run_dir)["train/skipped_steps"] == [(1, 0.0), (2, 1.0), (3, 1.0), (4, 1.0)]


def test_on_nonfinite_off_logs_the_nonfinite_loss_and_goes_on(train_here):
    run_dir = train_here(*TINY, "model._target_=hostile_steps.ReturnsNonFinite", "on_nonfinite=off")
    assert "train/skipped_steps" not in read_scalars(run_dir)


@pytest.mark.parametrize(
    ("overrides", "status", "found"),
    [(("+model.update_on=0", "accumulate=2"), FAIL, NEVER_APPLIES.format(on=1, window=2)),
     (("+model.update_on=1", "accumulate=2"), PASS, "4 of 4 trainable tensors changed"),
     (("+model.update_on=0", "+model.window=1"), PASS, "4 of 4 trainable tensors changed")],
)  # fmt: skip
def test_doctor_tries_a_models_own_step_on_a_window_of_accumulate(
    monkeypatch, caplog, overrides, status, found
):
    monkeypatch.syspath_prepend(str(PLUGINS))
    caplog.set_level(logging.WARNING)
    config = composed(*TINY, "model._target_=hostile_steps.UpdatesOnOneMicroBatch", *overrides)
    optimizer_factory = lambda model: build_optimizer(instantiate, config, model)  # noqa: E731
    setup = Setup.of(config, prepare(config, instantiate, config.seed), optimizer_factory)
    update_check = run_checks(setup)[5]
    assert update_check.status == status, update_check
    assert update_check.found.startswith(found), update_check
