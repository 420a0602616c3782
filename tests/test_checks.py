"""The config rules on their own: what is accepted and what the message says."""

import pytest

from runner.checks import ConfigError, check_top_level_key, check_value, validate_config


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("clip", 1.0), ("clip", 2), ("clip", None), ("accumulate", 4), ("seed", None), ("seed", 0),
        ("device", "cuda:1"), ("device", "auto"), ("precision", "bf16"), ("optimizer.lr", 0),
        ("trainer.max_steps", None), ("data.num_workers", 0), ("deterministic", True),
    ],
)  # fmt: skip
def test_accepted_values(key, value):
    check_value(key, value)


@pytest.mark.parametrize(
    ("key", "value", "allowed"),
    [
        ("clip", 0, "> 0"), ("clip", -1, "> 0"), ("clip", "abc", "> 0"), ("clip", True, "> 0"),
        ("accumulate", 0, ">= 1"), ("accumulate", 1.5, ">= 1"), ("precision", "fp8", "fp32, amp, bf16"),
        ("device", "tpu", "cuda:N"), ("device", "cuda:x", "cuda:N"), ("seed", -1, "2**32"),
        ("optimizer.lr", -1, ">= 0"), ("data.batch_size", 0, ">= 1"), ("trainer.max_steps", -5, ">= 1"),
        ("deterministic", "yes", "true or false"),
    ],
)  # fmt: skip
def test_rejected_values_name_key_value_and_what_is_allowed(key, value, allowed):
    with pytest.raises(ConfigError) as error:
        check_value(key, value)
    message = str(error.value)
    assert message.startswith(f"{key}=")
    assert allowed in message
    assert "\n" not in message


def test_unknown_top_level_key_lists_the_known_ones():
    with pytest.raises(ConfigError, match=r"foo=1: 'foo' is not a config key; known .*accumulate"):
        check_top_level_key("foo", given="foo=1")
    check_top_level_key("trainer.max_steps", given="trainer.max_steps=3")


def _config(**changes):
    config = {
        "device": "cpu", "seed": 0, "deterministic": False, "precision": "fp32", "clip": 1.0,
        "accumulate": 1,
        "trainer": {"max_steps": None, "max_epochs": 1, "log_every_n_steps": 1,
                    "val_every_n_epochs": 1, "val_every_n_steps": None},
        "data": {"dataset": {"_target_": "x"}, "input_shape": [2], "num_outputs": 1,
                 "batch_size": 2, "shuffle": True, "num_workers": 0},
        "model": {"_target_": "m"}, "optimizer": {"_target_": "o", "lr": 0.1},
        "scheduler": {"name": "none", "warmup_steps": 0, "min_lr": 0.0, "step_size": 1, "gamma": 0.1},
        "loss": {"_target_": "l"},
        "checkpoint": {"enabled": True, "every_n_steps": None, "every_n_epochs": 1, "keep_last": 2,
                       "monitor": "val/loss", "mode": "min", "save_best": True},
        "resume": None,
    }  # fmt: skip
    for key, value in changes.items():
        section, _, leaf = key.rpartition("__")
        (config[section] if section else config)[leaf] = value
    return config


def test_composed_config_is_checked_as_a_whole():
    validate_config(_config())
    with pytest.raises(ConfigError, match=r"optimizer\.lr=-0\.5"):
        validate_config(_config(optimizer__lr=-0.5))
    with pytest.raises(ConfigError, match="never stop"):
        validate_config(_config(trainer__max_epochs=None))
    with pytest.raises(ConfigError, match=r"loss\._target_ is not set"):
        validate_config(_config(loss=None))
    with pytest.raises(ConfigError, match=r"set checkpoint\.mode=max"):
        validate_config(_config(checkpoint__monitor="val/acc"))


def test_hydra_run_mode_detection_is_skipped_only_where_no_config_can_set_the_mode():
    """Start-up skips Hydra's extra composition that reads ``hydra.mode``: safe only because no shipped
    config sets it, and only while nothing else (another primary config, a search path) can."""
    from pathlib import Path

    import yaml

    from runner.app import CONFIG_DIR, config_may_set_run_mode

    for path in Path(CONFIG_DIR).rglob("*.yaml"):
        document = yaml.safe_load(path.read_text()) or {}
        assert "mode" not in (document.get("hydra") or {}), path
    assert not config_may_set_run_mode(["optimizer.lr=0.1", "-m", "seed=0,1", "hydra.run.dir=x"])
    for arguments in (["hydra.mode=MULTIRUN"], ["+hydra.mode=RUN"], ["hydra.searchpath=[file://my/conf]"],
                      ["--config-name", "mine"], ["-cn=mine"], ["--config-dir", "my/conf"]):  # fmt: skip
        assert config_may_set_run_mode(arguments), arguments
