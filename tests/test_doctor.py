"""runner doctor: each deliberately broken setup is caught by the right check, and by no earlier one."""

import json
import logging
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F
from conftest import PLUGINS, composed
from hydra.utils import instantiate
from torch import nn
from torch.utils.data import TensorDataset

from runner.cli.main import main
from runner.data.loading import make_loaders
from runner.experiment.setup import build_optimizer, prepare
from runner.tools.doctor import FAIL, PASS, SKIP, Setup, run_checks
from runner.training.batches import ModelLoss
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
    return setup_on(model, TensorDataset(inputs, targets), loss_fn, lr, clip)


def setup_on(model, dataset, loss_fn=None, lr=0.05, clip=1.0, target_key="labels"):
    """Any data set: its samples may be pairs, dicts or anything else a loader collates."""
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
        target_key=target_key,
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


class SqrtOutputs(nn.Module):
    """The square root of the logits: NaN wherever a logit is negative, before any training step."""

    def __init__(self):
        super().__init__()
        self.body = mlp()

    def forward(self, inputs):
        return self.body(inputs).sqrt()


class NaNInEval(nn.Module):
    """Finite in train(); NaN in eval(), the same NaN in every eval forward."""

    def __init__(self):
        super().__init__()
        self.body = mlp()

    def forward(self, inputs):
        outputs = self.body(inputs)
        return outputs if self.training else outputs * float("nan")


class WithNaNBuffer(nn.Module):
    """A healthy MLP holding a buffer of NaN that forward never reads (an unset statistic)."""

    def __init__(self):
        super().__init__()
        self.body = mlp()
        self.register_buffer("unset", torch.full((3,), float("nan")))

    def forward(self, inputs):
        return self.body(inputs)


def frozen():
    model = mlp()
    model.requires_grad_(False)
    return model


def with_nans(inputs):
    inputs = inputs.clone()
    inputs[3, 2] = float("nan")
    return inputs


INPUTS, LABELS = blobs()
TINY_DATA = (
    "data=classification",
    "data.dataset.num_train=64",
    "data.dataset.num_val=32",
    "data.batch_size=16",
)
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
        ("NaN outputs", lambda: setup_for(SqrtOutputs(), INPUTS, LABELS), 4),
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


def statuses(results):
    return [result.status for result in results]


def said(result):
    return f"{result.found} / {result.advice}"


def test_nan_outputs_are_named_nan_by_every_check_and_not_blamed_on_dropout():
    results = run_checks(setup_for(SqrtOutputs(), INPUTS, LABELS))
    table = [(r.number, r.status, r.found) for r in results]
    assert statuses(results) == [PASS] * 3 + [FAIL] * 5, table
    loss, gradients, update, validation, overfit = results[3:]
    assert loss.found.startswith("the loss is NaN: the model's outputs contain "), said(loss)
    assert "NaN of 48 values, before any training step" in loss.found, said(loss)
    assert "sqrt" in loss.advice and "learning rate" not in loss.advice, said(loss)  # no step was taken
    assert gradients.found.startswith("the gradients are NaN in body.0.weight"), said(gradients)
    assert update.found.startswith("the parameters are NaN after one optimizer step"), said(update)
    assert validation.found.startswith("the model's outputs in eval() contain "), said(validation)
    assert "NaN of 48 values (as in train(): see check 4)" in validation.found, said(validation)
    assert overfit.found.startswith("the loss is NaN from the first step"), said(overfit)
    assert not any("dropout" in said(result) or "randomness" in said(result) for result in results), table


def test_nan_only_in_eval_fails_check_7_saying_nan_not_dropout():
    """NaN never equals NaN: two eval forwards that give the same NaN are the same output."""
    results = run_checks(setup_for(NaNInEval(), INPUTS, LABELS))
    table = [(r.number, r.status, r.found) for r in results]
    assert statuses(results) == [PASS] * 6 + [FAIL, PASS], table
    validation = results[6]
    assert validation.found == (
        "the model's outputs in eval() contain 48 NaN of 48 values (in train() the loss was finite)"
    ), said(validation)
    assert "dropout" not in said(validation) and "eval()" in validation.advice, said(validation)


def test_a_buffer_that_is_nan_before_and_after_validation_has_not_changed():
    results = run_checks(setup_for(WithNaNBuffer(), INPUTS, LABELS))
    assert statuses(results) == [PASS] * 8, [(r.number, r.found) for r in results]


def test_parameters_that_turn_inf_in_one_step_fail_check_6_and_are_undone():
    setup = setup_for(mlp(), INPUTS * 100, LABELS, clip=None)
    setup.optimizer_factory = lambda m: torch.optim.SGD(m.parameters(), lr=1e38)
    results = run_checks(setup)
    table = [(r.number, r.status, r.found) for r in results]
    assert FAIL not in statuses(results)[:5], table
    update, validation, overfit = results[5:]
    assert update.status == FAIL, table
    assert update.found.startswith(
        "the parameters are Inf after one optimizer step with finite gradients (lr 1e+38 too high?): "
    ), said(update)
    assert update.advice == "lower the learning rate (optimizer.lr); add gradient clipping (clip=1.0)"
    # The step is undone: validation tests the model as built, not the step's Inf.
    assert validation.status == PASS, said(validation)
    assert all(torch.isfinite(p).all() for p in setup.model.parameters())
    assert overfit.status == FAIL and overfit.found.startswith("the loss went "), said(overfit)


def test_a_step_that_makes_the_loss_nan_fails_check_6_and_check_8_says_when():
    results = run_checks(setup_for(mlp(), INPUTS, LABELS, lr=1e30))
    table = [(r.number, r.status, r.found) for r in results]
    assert statuses(results) == [PASS] * 5 + [FAIL, PASS, FAIL], table
    update, overfit = results[5], results[7]
    assert update.found.startswith(
        "one optimizer step (lr 1e+30) made the loss on the same batch NaN (it was "
    ), said(update)
    assert "the largest parameter is now 1e+30" in update.found, said(update)
    assert overfit.found.startswith("the loss went NaN at step 2 of 100 on one batch (it was "), said(overfit)
    assert "learning rate" in overfit.advice and "clip=1.0" not in overfit.advice  # clip is on already
    assert not any("dropout" in said(result) for result in results), table


def doctor_on(*overrides: str) -> list:
    """The checks on what ``runner doctor OVERRIDES`` builds, from the real composed config."""
    config = composed(*overrides)
    prepared = prepare(config, instantiate, config.seed)
    return run_checks(Setup.of(config, prepared, lambda model: build_optimizer(instantiate, config, model)))


def advises(results, direction: str) -> bool:
    return any(f"{direction} the learning rate" in r.advice or f"{direction} the lr" in r.advice
               for r in results)  # fmt: skip


def test_a_loss_that_more_than_doubles_advises_a_lower_learning_rate():
    """The char RNN at lr 0.3: the loss on one batch rises from about 5 to about 15."""
    results = doctor_on("data=text", "model=char_rnn", "optimizer.lr=0.3")
    overfit = results[7]
    first, last = (float(number) for number in overfit.found.split()[1:4:2])
    assert last > 2 * first, said(overfit)
    assert overfit.status == FAIL and "it more than doubled" in overfit.found, said(overfit)
    assert overfit.advice == "lower the learning rate (optimizer.lr)", said(overfit)
    assert not advises(results, "raise"), [said(r) for r in results]


def test_the_overfit_check_starts_from_the_models_own_loss():
    """Check 6's trial step is undone: check 8 trains from the model as built, its first loss is check
    4's (at lr 3 the step alone took the loss from 3.965 to about 62, reported as the start)."""
    results = doctor_on("data=text", "model=char_rnn", "optimizer.lr=3")
    loss, overfit = results[3].found.removeprefix("loss "), results[7]
    assert overfit.found.startswith(f"loss {loss} -> "), said(overfit)
    assert "more than doubled" in overfit.found and overfit.advice.startswith("lower the learning rate")


@pytest.mark.parametrize(
    "make_setup",
    [
        lambda: setup_for(mlp(), INPUTS, LABELS, lr=1e-7),  # too low: the loss stays where it was
        lambda: setup_for(mlp(), INPUTS, LABELS, lr=1e30),  # too high: NaN in one step
        lambda: setup_for(mlp(), INPUTS * 1e3, LABELS, lr=1e-7, clip=None),  # large gradients, too low
    ],
)
def test_one_report_never_advises_both_a_higher_and_a_lower_learning_rate(make_setup):
    results = run_checks(make_setup())
    assert advises(results, "raise") or advises(results, "lower"), [said(r) for r in results]
    assert not (advises(results, "raise") and advises(results, "lower")), [said(r) for r in results]


def test_healthy_setup_passes_every_check():
    results = run_checks(setup_for(mlp(), INPUTS, LABELS))
    assert [result.status for result in results] == [PASS] * 8, [(r.number, r.found) for r in results]
    assert [result.number for result in results] == list(range(1, 9))


class DictModel(nn.Module):
    """Takes its batch as keywords, as the engine calls it on a dict batch (labels included)."""

    def __init__(self):
        super().__init__()
        self.body = mlp()

    def forward(self, features, mask=None, labels=None):
        return self.body(features if mask is None else features * mask)


def dict_samples(inputs, labels, **more):
    return [
        {"features": inputs[i], "labels": labels[i], **{k: v[i] for k, v in more.items()}}
        for i in range(len(labels))
    ]


@dataclass
class LanguageModelOutput:
    loss: torch.Tensor | None
    logits: torch.Tensor


class TinyLanguageModel(nn.Module):
    """A transformers-style model: keywords in; out, its own loss (labels of -100 ignored) and
    (N, T, V) logits."""

    def __init__(self, vocabulary=12, width=16):
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(vocabulary, width)
        self.head = nn.Linear(width, vocabulary)

    def forward(self, input_ids, attention_mask, labels=None):
        logits = self.head(self.embed(input_ids) * attention_mask[..., None])
        loss = None if labels is None else F.cross_entropy(logits.flatten(0, 1), labels.flatten())
        return LanguageModelOutput(loss, logits)


def token_samples(num_samples=8, length=6, vocabulary=12):
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(vocabulary, (num_samples, length), generator=generator)
    labels = (input_ids * 5 + 1) % vocabulary  # a rule the model can learn from each token
    labels[:, -1] = -100  # ignored, as padding is
    mask = torch.ones(num_samples, length, dtype=torch.long)
    return [
        {"input_ids": input_ids[i], "attention_mask": mask[i], "labels": labels[i]}
        for i in range(num_samples)
    ]


class PerSampleLoss(nn.Module):
    """Returns one loss per sample where loss=from_model needs one scalar."""

    def __init__(self):
        super().__init__()
        self.body = mlp()

    def forward(self, features, labels):
        return F.cross_entropy(self.body(features), labels, reduction="none")


def test_dict_batch_with_an_external_loss_passes_every_check():
    results = run_checks(setup_on(DictModel(), dict_samples(INPUTS, LABELS)))
    assert [result.status for result in results] == [PASS] * 8, [(r.number, r.found) for r in results]
    assert results[0].found.startswith("features (16, 8) float32 in [")
    assert "; labels (16,) int64 in [0, 2]" in results[0].found
    assert results[1].found == "prediction (16, 3), target (16,) int64"


def test_transformers_style_model_with_its_own_loss_passes_every_check():
    results = run_checks(setup_on(TinyLanguageModel(), token_samples(), ModelLoss()))
    assert [result.status for result in results] == [PASS] * 8, [(r.number, r.found) for r in results]
    assert "logits (8, 6, 12) float32, labels (8, 6) int64" in results[1].found
    first, last = (float(number) for number in results[7].found.split()[1:4:2])
    assert last < 0.7 * first  # the overfit check trained the model on the batch


@pytest.mark.parametrize(
    ("make_setup", "named"),
    [
        (
            lambda: setup_on(mlp(), TensorDataset(INPUTS, LABELS, LABELS.float())),
            ["list of 3 (Tensor[16, 8] float32, Tensor[16] int64, Tensor[16] float32)", "CrossEntropyLoss"],
        ),
        (
            lambda: setup_on(DictModel(), dict_samples(INPUTS, LABELS), target_key="label"),
            ["has no 'label' (data.target_key)", "features=Tensor[16, 8] float32"],
        ),
    ],
    ids=["3-tuple", "dict without data.target_key"],
)
def test_batch_the_engine_cannot_use_fails_check_1_with_the_engines_message(make_setup, named):
    results = run_checks(make_setup())
    assert [result.number for result in results if result.status == FAIL] == [1]
    found = results[0].found
    assert "\n" not in found and all(text in found for text in named), found
    assert all(result.status == SKIP for result in results[1:]), [(r.number, r.found) for r in results]


def test_nan_in_one_key_of_a_dict_batch_fails_check_1_naming_the_key():
    mask = torch.ones_like(INPUTS)
    results = run_checks(setup_on(DictModel(), dict_samples(INPUTS, LABELS, mask=with_nans(mask))))
    assert first_failure(results) == 1
    assert results[0].found.startswith("mask hold 1 NaN and 0 Inf values"), results[0].found
    assert "features" not in results[0].found.split("(")[0]


def test_model_loss_that_is_not_a_scalar_fails_check_2_saying_what_to_return():
    results = run_checks(setup_on(PerSampleLoss(), dict_samples(INPUTS, LABELS), ModelLoss()))
    assert [r.number for r in results if r.status == FAIL] == [2], [(r.number, r.found) for r in results]
    assert "returned Tensor[16] float32" in results[1].found
    assert "it must return a scalar loss tensor" in results[1].found
    assert results[1].advice


@pytest.fixture
def doctor(tmp_path, monkeypatch, capsys):
    """``python -m runner doctor ARGUMENTS`` from ``tmp_path`` (the test plug-ins importable), in this
    process: the real command line, Hydra and all; its exit status and what it printed."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(PLUGINS))
    for logger in [logging.getLogger(name) for name in list(logging.root.manager.loggerDict)]:
        monkeypatch.setattr(logger, "disabled", logger.disabled)  # doctor's job_logging=disabled sets them

    def run(*arguments: str) -> tuple[int, str]:
        with pytest.raises(SystemExit) as exited:
            main(["doctor", *arguments])
        return exited.value.code, capsys.readouterr().out

    return run


def test_doctor_command_on_the_default_experiment(tmp_path, doctor):
    code, out = doctor()
    assert code == 0, out
    assert "all checks passed" in out
    assert "1. [pass] one batch loads: inputs (32, 1, 8, 8) float32 in [0, 1]" in out
    assert not list(tmp_path.iterdir())  # the doctor writes nothing


def test_doctor_command_json_names_the_failing_check(doctor):
    code, out = doctor("--json", "data=regression", "data.dataset._target_=broken.squeezed_regression")
    assert code == 1, out
    checks = json.loads(out)
    assert next(check["number"] for check in checks if check["status"] == FAIL) == 2
    assert "broadcasts" in checks[1]["found"]


def test_doctor_command_says_nan_for_a_model_whose_outputs_are_nan(tmp_path, doctor):
    code, out = doctor("--json", *TINY_DATA, "model._target_=nan_model.SqrtOutputs")
    assert code == 1, out
    checks = json.loads(out)
    assert [check["number"] for check in checks] == list(range(1, 9))
    assert [check["status"] for check in checks] == [PASS] * 3 + [FAIL] * 5, checks
    assert checks[3]["found"].startswith("the loss is NaN: the model's outputs contain "), checks[3]
    assert checks[5]["found"].startswith("the parameters are NaN after one optimizer step"), checks[5]
    assert checks[6]["found"].startswith("the model's outputs in eval() contain "), checks[6]
    assert "NaN" in checks[6]["found"], checks[6]
    assert "dropout" not in out and "randomness" not in out
    assert not list(tmp_path.iterdir())  # the doctor writes nothing


def test_doctor_command_says_a_learning_rate_that_makes_the_loss_nan_in_one_step(doctor):
    code, out = doctor(*TINY_DATA, "optimizer.lr=1e30")
    assert code == 1, out
    assert "6. [FAIL] parameters change after optimizer.step(): one optimizer step (lr 1e+30) made " \
        "the loss on the same batch NaN" in out, out  # fmt: skip
    assert "7. [pass] validation runs in eval() without gradients" in out, out
    assert "8. [FAIL] sanity run: overfit one batch: the loss went NaN at step 2" in out
    assert "dropout" not in out
