"""runner doctor: each deliberately broken setup is caught by the right check, and by no earlier one."""

import json
import os

import pytest
import torch
import torch.nn.functional as F
from conftest import REPO, run_cli
from torch import nn
from torch.utils.data import TensorDataset

from runner.data.loading import make_loaders
from runner.tools.doctor import FAIL, PASS, Setup, run_checks
from runner.training.precision import resolve_precision

CPU = torch.device("cpu")


def blobs(num_samples=64, num_features=8, num_classes=3):
    generator = torch.Generator().manual_seed(0)
    labels = torch.randint(num_classes, (num_samples,), generator=generator)
    centres = torch.randn(num_classes, num_features, generator=generator) * 3
    return centres[labels] + torch.randn(num_samples, num_features, generator=generator), labels


def mlp(num_features=8, num_outputs=3):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(num_features, 16), nn.ReLU(), nn.Linear(16, num_outputs))


def setup_for(model, inputs, targets, loss_fn=None, lr=0.05, clip=1.0):
    dataset = TensorDataset(inputs, targets)
    train_loader, val_loader, _ = make_loaders(dataset, dataset, 16, True, 0, 0, pin_memory=False)
    return Setup(
        model=model,
        optimizer_factory=lambda m: torch.optim.Adam(m.parameters(), lr=lr),
        loss_fn=loss_fn or nn.CrossEntropyLoss(),
        train_loader=train_loader,
        val_loader=val_loader,
        device=CPU,
        precision=resolve_precision("fp32", CPU),
        clip=clip,
    )


def first_failure(results):
    return next((result.number for result in results if result.status == FAIL), None)


class UnusedLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.used = mlp()
        self.unused = nn.Linear(8, 3)

    def forward(self, inputs):
        return self.used(inputs)


class DropoutAlwaysOn(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = mlp()

    def forward(self, inputs):
        return F.dropout(self.body(inputs), p=0.5, training=True)


class Softmaxed(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = mlp()

    def forward(self, inputs):
        return self.body(inputs).softmax(dim=1)


def frozen():
    model = mlp()
    model.requires_grad_(False)
    return model


def with_nans(inputs):
    inputs = inputs.clone()
    inputs[3, 2] = float("nan")
    return inputs


INPUTS, LABELS = blobs()
REGRESSION_TARGETS = INPUTS.sum(dim=1)  # shape (N,): broadcasts against a (N, 1) prediction


@pytest.mark.parametrize(
    ("name", "make_setup", "caught_by"),
    [
        ("NaN inputs", lambda: setup_for(mlp(), with_nans(INPUTS), LABELS), 1),
        (
            "broadcasting (N,1) vs (N,)",
            lambda: setup_for(mlp(8, 1), INPUTS, REGRESSION_TARGETS, nn.MSELoss()),
            2,
        ),
        ("float class targets", lambda: setup_for(mlp(), INPUTS, LABELS.float()), 2),
        ("class targets out of range", lambda: setup_for(mlp(8, 2), INPUTS, LABELS), 2),
        ("probabilities into cross-entropy", lambda: setup_for(Softmaxed(), INPUTS, LABELS), 2),
        (
            "loss overflows",
            lambda: setup_for(mlp(8, 1), INPUTS * 1e20, REGRESSION_TARGETS[:, None], nn.MSELoss()),
            4,
        ),
        ("unused layer", lambda: setup_for(UnusedLayer(), INPUTS, LABELS), 5),
        ("frozen model", lambda: setup_for(frozen(), INPUTS, LABELS), 6),
        ("lr=0", lambda: setup_for(mlp(), INPUTS, LABELS, lr=0.0), 6),
        ("dropout active in validation", lambda: setup_for(DropoutAlwaysOn(), INPUTS, LABELS), 7),
        ("cannot overfit one batch", lambda: setup_for(mlp(), INPUTS, LABELS, lr=1e-7), 8),
    ],
)
def test_broken_setup_is_caught_by_the_right_check(name, make_setup, caught_by):
    results = run_checks(make_setup())
    assert first_failure(results) == caught_by, [(r.number, r.status, r.found) for r in results]
    failing = results[caught_by - 1]
    assert failing.advice, name


def test_healthy_setup_passes_every_check():
    results = run_checks(setup_for(mlp(), INPUTS, LABELS))
    assert [result.status for result in results] == [PASS] * 8, [(r.number, r.found) for r in results]
    assert [result.number for result in results] == list(range(1, 9))


@pytest.mark.slow
def test_doctor_command_on_the_default_experiment(tmp_path):
    result = run_cli("doctor", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "all checks passed" in result.stdout
    assert "1. [pass] one batch loads: inputs (32, 1, 8, 8) float32 in [0, 1]" in result.stdout
    assert not list(tmp_path.iterdir())  # the doctor writes nothing


@pytest.mark.slow
def test_doctor_command_json_names_the_failing_check(tmp_path):
    plugins = str(REPO / "tests" / "plugins")
    result = run_cli(
        "doctor", "--json", "data=regression", "data.dataset._target_=broken.squeezed_regression",
        cwd=tmp_path, env={"PYTHONPATH": plugins + os.pathsep + os.environ.get("PYTHONPATH", "")},
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    checks = json.loads(result.stdout)
    assert next(check["number"] for check in checks if check["status"] == FAIL) == 2
    assert "broadcasts" in checks[1]["found"]
