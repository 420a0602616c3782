"""No config read from a file runs code: a checkpoint's stored config is checked as ``instantiate``
will see it (resolved once, no interpolation left, every ``_target_`` named by the user), whatever
resolver trick it holds. In this process, on the real ``eval`` function with a real checkpoint."""

import contextlib
import copy
from pathlib import Path

import optuna
import pytest
import torch
from conftest import TINY, composed
from hydra.utils import instantiate

from runner.checkpoint.files import atomic_save
from runner.cli.hydra.hydra_app import CONFIG_DIR
from runner.cli.hydra.optuna_space import search_space
from runner.config.errors import ConfigError
from runner.config.trust import check_config_from_file, folder_targets, is_live_interpolation
from runner.config.typed import as_dict, typed_config
from runner.experiment.train import train
from runner.search.trials import tell_study
from runner.tools.evaluation import evaluate_checkpoint

ESCAPED = "\\${oc.create:{_target_: pathlib.Path.touch, self: MARKER}}"  # as a file holds it
CREATE = "${oc.create:{_target_: pathlib.Path.touch, self: MARKER}}"
BRACES = "{oc.create:{_target_: pathlib.Path.touch, self: MARKER}}"  # a "$" before it makes CREATE
STILL_AN_INTERPOLATION = "which is still an interpolation once resolved"


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> dict:
    """A real finished run's ``last.pt``, as loaded."""
    run_dir = tmp_path_factory.mktemp("trust") / "run"
    run_dir.mkdir()
    torch.set_num_threads(1)
    train(composed(*TINY), run_dir, build=instantiate)
    return torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)


def with_marker(value, marker: Path):
    """``value`` with ``MARKER`` in its strings (keys too) replaced by the marker file's path."""
    if isinstance(value, dict):
        return {with_marker(key, marker): with_marker(item, marker) for key, item in value.items()}
    if isinstance(value, list):
        return [with_marker(item, marker) for item in value]
    return value.replace("MARKER", str(marker)) if isinstance(value, str) else value


def forged(stored: dict, path: Path, marker: Path, change) -> Path:
    """``stored`` with its config changed by ``change(config)``, saved as a valid checkpoint (whoever
    changed it can compute the checksum too)."""
    checkpoint = copy.deepcopy(stored)
    change(checkpoint["config"])
    checkpoint["config"] = with_marker(checkpoint["config"], marker)
    atomic_save(checkpoint, path)
    return path


def evaluate(path: Path) -> dict:
    return evaluate_checkpoint(path, "cpu", instantiate, "val", folder_targets(CONFIG_DIR))


EMA = {"_target_": "runner.training.callbacks.EMA", "decay": [ESCAPED]}
TOUCH = {"_target_": "pathlib.Path.touch", "self": "MARKER"}
DECODE = "${oc.decode:'{_target_: pathlib.Path.touch, self: \"MARKER\"}'}"
# name: (how the file's config is changed, what the one line names, and the section whose spec,
# built as the file holds it once resolved, runs the payload: the check is what stops it; None where
# the payload is refused though it would not run).
PAYLOADS = {
    "escaped-in-model-value": (lambda c: c["model"].update(hidden=ESCAPED), "model.hidden=", "model"),
    "escaped-in-loss-value": (lambda c: c["loss"].update(weight=ESCAPED), "loss.weight=", "loss"),
    "escaped-in-dataset": (
        lambda c: c["data"]["dataset"].update(extra=ESCAPED),
        "data.dataset.extra=",
        "data.dataset",
    ),
    "escaped-in-metric": (
        lambda c: c["metrics"]["acc"].update(extra=ESCAPED),
        "metrics.acc.extra=",
        "metrics.acc",
    ),
    "escaped-in-a-list": (lambda c: c["model"].update(extra=[1, ESCAPED]), "model.extra.1=", "model"),
    "escaped-in-nested-dicts-and-lists": (
        lambda c: c["model"].update(extra={"a": [{"b": {"c": ESCAPED}}]}),
        "model.extra.a.0.b.c=",
        "model",
    ),
    "escaped-in-args": (lambda c: c["loss"].update(_args_=[ESCAPED]), "loss._args_.0=", "loss"),
    "escaped-in-partial": (lambda c: c["loss"].update(_partial_=ESCAPED), "loss._partial_=", None),
    "escaped-in-a-callback": (
        lambda c: c["callbacks"].update(ema=EMA),
        "callbacks.ema.decay.0=",
        "callbacks.ema",
    ),
    "escaped-twice": (lambda c: c["model"].update(extra="\\\\\\" + CREATE), "model.extra=", None),
    "escaped-inside-text": (lambda c: c["model"].update(extra="a \\" + CREATE + " b"), "model.extra=", None),
    "in-a-key": (lambda c: c["model"].update({ESCAPED: 1}), STILL_AN_INTERPOLATION, None),
    "env-var-holding-one": (
        lambda c: c["model"].update(extra="${oc.env:RUNNER_TEST_PAYLOAD}"),
        "model.extra=",
        "model",
    ),
    "made-by-concatenation": (
        lambda c: c["model"].update(extra="$${oc.env:RUNNER_TEST_BRACES}"),
        "model.extra=",
        "model",
    ),
    # A live interpolation is refused before anything resolves it (a checkpoint's config is saved resolved).
    "target-by-oc-create": (
        lambda c: c["model"].update(extra=[CREATE]),
        "holds model.extra.0=${oc.create:",
        "model",
    ),
    "target-by-oc-decode": (
        lambda c: c["model"].update(extra=[DECODE]),
        "holds model.extra.0=${oc.decode:",
        "model",
    ),
    "target-in-a-list-of-dicts": (
        lambda c: c["model"].update(extra=[{"a": 1}, TOUCH]),
        "names model.extra.1._target_=pathlib.Path.touch",
        "model",
    ),
    "target-in-args": (
        lambda c: c["loss"].update(_args_=[TOUCH]),
        "names loss._args_.0._target_=pathlib.Path.touch",
        "loss",
    ),
}


def section(config: dict, dotted: str) -> dict:
    for part in dotted.split("."):
        config = config[part]
    return config


@pytest.mark.parametrize("name", PAYLOADS)
def test_a_checkpoint_config_that_would_run_code_is_refused_by_eval(stored, tmp_path, monkeypatch, name):
    change, says, live = PAYLOADS[name]
    marker = tmp_path / "code-ran"
    monkeypatch.setenv("RUNNER_TEST_PAYLOAD", CREATE.replace("MARKER", str(marker)))
    monkeypatch.setenv("RUNNER_TEST_BRACES", BRACES.replace("MARKER", str(marker)))
    path = forged(stored, tmp_path / "evil.pt", marker, change)
    with pytest.raises(ConfigError) as refused:
        evaluate(path)
    message = str(refused.value)
    assert message.startswith(f"checkpoint {path}") and says in message and "\n" not in message
    assert not marker.exists()
    if live is not None:  # the payload is real: built as the file holds it, once resolved, it runs
        config = as_dict(typed_config(torch.load(path, weights_only=True)["config"]))
        with contextlib.suppress(Exception):  # the payload runs as the arguments are built; a
            instantiate(section(config, live))  # constructor may refuse them after
        assert marker.exists(), name


def test_hydras_resolver_in_a_checkpoint_is_one_line(stored, tmp_path):
    path = forged(
        stored, tmp_path / "evil.pt", tmp_path / "m", lambda c: c["model"].update(extra="${hydra:job.name}")
    )
    with pytest.raises(ConfigError, match=r"model\.extra"):
        evaluate(path)


def test_the_schedulers_planned_values_are_the_only_interpolations_allowed():
    config = as_dict(composed(*TINY, "scheduler=onecycle"))
    planned = {key: value for key, value in config["scheduler"].items() if value == "${total_steps}"}
    assert planned  # onecycle's total_steps: filled in where the scheduler is built
    check_config_from_file(config, folder_targets(CONFIG_DIR), "here", "")
    for value in ("${total_steps} ${oc.create:{_target_: x}}", "\\${total_steps}"):
        with pytest.raises(ConfigError, match=STILL_AN_INTERPOLATION):
            check_config_from_file(
                {**config, "scheduler": {**config["scheduler"], "x": value}}, set(), "here", ""
            )
    nested = {**config, "scheduler": {**config["scheduler"], "x": {"y": "${total_steps}"}}}
    with pytest.raises(ConfigError, match=r"scheduler\.x\.y="):
        check_config_from_file(nested, set(), "here", "")


def test_a_clean_checkpoint_is_evaluated(stored, tmp_path):
    path = forged(stored, tmp_path / "clean.pt", tmp_path / "m", lambda c: None)
    assert evaluate(path)["step"] == stored["global_step"]


@pytest.mark.filterwarnings("ignore:The value .* is out of range:UserWarning")  # Optuna's, on that point
def test_every_point_of_a_float_grid_is_a_setting_of_its_search():
    """A proposal must hold the search's settings; a float grid's last point, 1.629 + 5 * 0.11, is
    2.1790000000000003, just above the range's end (2.179), and still one of them."""
    space = search_space(None, ["optimizer.lr=range(1.629,2.234,0.11)"])
    study = optuna.create_study(sampler=optuna.samplers.GridSampler(space.grid(), seed=0))
    for _ in space.grid()["optimizer.lr"]:
        trial = study.ask(space.distributions)
        assert space.holds(trial.params), trial.params
        tell_study(study, trial.number, values=[1.0])
    assert not space.holds({"optimizer.lr": 2.3}) and not space.holds({"optimizer.lr": "${oc.create:{}}"})


def test_an_escaped_interpolation_is_not_a_live_one():
    """OmegaConf reads ``\\${`` as a literal ``${``, and ``\\\\${`` as a backslash and an interpolation."""
    assert is_live_interpolation("${a}") and is_live_interpolation("x ${a}")
    assert is_live_interpolation("\\\\${a}") and is_live_interpolation("$${a}")
    assert not is_live_interpolation("\\${a}") and not is_live_interpolation("\\\\\\${a}")
    assert not is_live_interpolation("plain $ {a}")
