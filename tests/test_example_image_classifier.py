"""The worked example in examples/image_classifier/: a user's own conv net on the digits, a torchmetrics
F1 score as a metric, early stopping and best.pt on it, all through runner's plug-in contract."""

import math

import pytest
import torch
import yaml
from conftest import REPO, read_scalars, run_example

from runner.data import load_digits

pytest.importorskip("torchmetrics")

EXAMPLE = REPO / "examples" / "image_classifier"
BATCH_SIZE = 128
# The user's overrides, then a larger batch: fewer steps per epoch, a shorter test.
EXPERIMENT = (f"hydra.searchpath=[file://{EXAMPLE / 'conf'}]", "+experiment=image_classifier",
              f"data.batch_size={BATCH_SIZE}")  # fmt: skip
# No F1 in [0, 1] can improve on the first validation's by more than 1: every later validation is a
# bad one, whatever the weights do (BatchNorm's running statistics move even with a learning rate of 0).
NOTHING_IMPROVES = "callbacks.early_stopping.min_delta=1.0"


@pytest.fixture
def train_example(train_here, monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE))
    return lambda *overrides, **kwargs: train_here(*EXPERIMENT, *overrides, **kwargs)


@pytest.fixture(scope="module")
def steps_per_epoch() -> int:
    train_set, _ = load_digits()
    return math.ceil(len(train_set) / BATCH_SIZE)


def stop_line(caplog) -> str:
    lines = [record.getMessage() for record in caplog.records if record.getMessage().startswith("stopped at")]
    assert len(lines) == 1, lines
    return lines[0]


def macro_f1(predicted: torch.Tensor, targets: torch.Tensor, num_classes: int) -> float:
    """The F1 score of each class, 2 TP / (2 TP + FP + FN), averaged with equal weight."""
    scores = []
    for label in range(num_classes):
        true_positives = ((predicted == label) & (targets == label)).sum().item()
        errors = ((predicted == label) != (targets == label)).sum().item()
        scores.append(2 * true_positives / (2 * true_positives + errors))
    return sum(scores) / num_classes


def test_a_run_logs_f1_and_accuracy_and_keeps_the_best_f1(train_example, steps_per_epoch):
    run_dir = train_example("trainer.max_epochs=4", "callbacks.early_stopping.patience=10")
    scalars = read_scalars(run_dir)
    validations = [steps_per_epoch * epoch for epoch in (1, 2, 3, 4)]
    assert [step for step, _ in scalars["val/f1"]] == validations
    assert [step for step, _ in scalars["val/acc"]] == validations
    best_step, best_f1 = max(scalars["val/f1"], key=lambda item: (item[1], -item[0]))  # the first best
    best = torch.load(run_dir / "checkpoints" / "best.pt")
    assert best["global_step"] == best_step
    assert best["best_val"] == pytest.approx(best_f1)

    # The logged val/f1 is the macro F1 of best.pt's weights on the validation set.
    config = yaml.safe_load((run_dir / "run.yaml").read_text())
    assert config["model"]["_target_"] == "image_classifier.small_cnn"
    from image_classifier import small_cnn

    model = small_cnn([1, 8, 8], 10, config["model"]["channels"], config["model"]["dropout"])
    model.load_state_dict(best["model_state_dict"])
    model.eval()
    _, val_set = load_digits()
    images, labels = (torch.stack(column) for column in zip(*val_set, strict=True))
    with torch.no_grad():
        predicted = model(images).argmax(dim=1)
    assert macro_f1(predicted, labels, 10) == pytest.approx(best_f1, abs=1e-6)


def test_early_stopping_ends_the_run_after_patience_bad_validations(train_example, caplog, steps_per_epoch):
    run_dir = train_example("trainer.max_epochs=10", "callbacks.early_stopping.patience=2", NOTHING_IMPROVES)
    stop_step = 3 * steps_per_epoch  # the first validation is the best, the next two are not
    assert [step for step, _ in read_scalars(run_dir)["val/f1"]] == [steps_per_epoch, 2 * steps_per_epoch,
                                                                      stop_step]  # fmt: skip
    assert torch.load(run_dir / "checkpoints" / "last.pt")["global_step"] == stop_step
    line = stop_line(caplog)
    assert line.startswith(
        f"stopped at step {stop_step} (epoch 3): early stopping: val/f1 has not improved by more than 1 "
        f"for 2 validation(s) (best "
    )
    assert f"at step {steps_per_epoch}, now " in line


def test_resuming_continues_the_count_of_bad_validations(train_example, caplog, steps_per_epoch):
    """Two epochs (one bad validation), then resumed with room for ten: with its state restored the
    callback stops after two more epochs, its best still the first run's first validation. Started
    afresh it would take the resumed run's first validation as the best and stop two epochs later."""
    first = ("callbacks.early_stopping.patience=3", NOTHING_IMPROVES)
    run_dir = train_example(*first, "trainer.max_epochs=2")
    last = run_dir / "checkpoints" / "last.pt"
    saved = torch.load(last)["callbacks_state_dict"]["early_stopping"]
    assert saved["best_step"] == steps_per_epoch and saved["bad_validations"] == 1
    assert not [record for record in caplog.records if record.getMessage().startswith("stopped at")]

    train_example(*first, f"resume={last}", "trainer.max_epochs=10", run_dir=run_dir)
    stop_step = 4 * steps_per_epoch
    assert torch.load(last)["global_step"] == stop_step
    line = stop_line(caplog)
    assert line.startswith(f"stopped at step {stop_step} (epoch 4): early stopping: val/f1")
    assert f"(best {saved['best']:.4g} at step {steps_per_epoch}, now " in line


@pytest.mark.slow
def test_the_users_command_line(tmp_path):
    """From the repository root, as the example's config file says to run it."""
    result = run_example("image_classifier", "trainer.max_steps=5", run_dir=tmp_path / "run")
    assert result.returncode == 0, result.stderr
    assert "metrics          val/acc, val/f1" in result.stdout
    assert "callbacks        early_stopping" in result.stdout
    scalars = read_scalars(tmp_path / "run")
    assert [step for step, _ in scalars["val/f1"]] == [5]
    assert torch.load(tmp_path / "run" / "checkpoints" / "last.pt")["global_step"] == 5
