"""The config rules on their own: what is accepted and what the message says."""

import re

import pytest
from hydra import compose, initialize_config_dir

from runner.cli.arguments import CommandLine
from runner.cli.hydra.hydra_app import CONFIG_DIR, check_command_line
from runner.config.checks import check_top_level_key, check_value
from runner.config.errors import ConfigError
from runner.config.schema import resume_policy
from runner.config.typed import typed_config


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


@pytest.mark.parametrize(
    ("given", "meant"),
    [("lr=0.01", "optimizer.lr"), ("hidden=[32]", "model.hidden"), ("max_steps=3", "trainer.max_steps")],
)
def test_a_key_given_without_its_section_names_the_key_it_most_likely_is(given, meant):
    with pytest.raises(
        ConfigError, match=rf"^{re.escape(given)}: .* not a config key; did you mean {meant}\? "
    ):
        check_command_line(CommandLine.parse([given]))


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
    typed_config(_config())
    with pytest.raises(ConfigError, match=r"optimizer\.lr=-0\.5"):
        typed_config(_config(optimizer__lr=-0.5))
    with pytest.raises(ConfigError, match="never stop"):
        typed_config(_config(trainer__max_epochs=None))
    with pytest.raises(ConfigError, match=r"loss\._target_ is not set"):
        typed_config(_config(loss=None))
    with pytest.raises(ConfigError, match=r"set checkpoint\.mode=max"):
        typed_config(_config(checkpoint__monitor="val/acc"))


def test_the_slurm_launcher_config_is_preemption_safe():
    """The shipped SLURM example: the preemption signal before the limit, requeues allowed."""
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        overrides = ["hydra/launcher=slurm", "hydra.launcher.partition=gpu"]
        config = compose("config", overrides, return_hydra_config=True)
    launcher = config.hydra.launcher
    assert launcher._target_.endswith("SlurmLauncher") and launcher.partition == "gpu"
    assert launcher.signal_delay_s > 0 and launcher.max_num_timeout > 0


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["+trainer.foo=1"], "trainer.foo is not a config key"),
        (["+foo=1"], "foo=1: 'foo' is not a config key"),
        (["data=base_data"], "data.dataset has no value; set it in the config or on the command line"),
        (["trainer.max_epochs=null"], "would never stop"),
    ],
)
def test_the_composed_config_is_typed_and_checked_once(overrides, message):
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        composed = compose("config", overrides=overrides)
    with pytest.raises(ConfigError, match=message):
        typed_config(composed)


def test_typed_config_reads_as_attributes_with_the_open_groups_as_mappings():
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        config = typed_config(compose("config", overrides=["optimizer=sgd", "model.hidden=[8]"]))
    assert config.trainer.max_epochs == 20 and config.checkpoint.monitor == "val/loss"
    assert config.optimizer["_target_"] == "torch.optim.SGD" and config.model["hidden"] == [8]
    assert config.model["input_shape"] == [1, 8, 8]  # interpolations resolved


@pytest.mark.parametrize(
    ("key", "policy"),
    [
        ("optimizer.lr", "same"), ("optimizer.betas", "same"), ("data.batch_size", "same"), ("clip", "same"),
        ("trainer.max_steps", "may_change"), ("checkpoint.monitor", "may_change"), ("device", "may_change"),
        ("data.num_workers", "may_change"), ("resume", "may_change"),
        ("model.hidden", "same"), ("model._target_", "same"), ("model.dropout", "same"),
    ],
)  # fmt: skip
def test_what_a_resume_may_change_is_declared_in_the_schema(key, policy):
    """The model's settings are math like the rest: a changed dropout fits the saved weights."""
    assert resume_policy(key) == policy
