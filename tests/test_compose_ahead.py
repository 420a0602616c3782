"""The config a forked child composes while the run imports torch is the very config Hydra composes."""

import pytest
from conftest import run_cli
from hydra import compose, initialize_config_dir
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra.errors import MissingConfigException
from omegaconf import OmegaConf
from omegaconf.errors import ValidationError

from runner.app import CONFIG_DIR, picks_an_unshipped_option
from runner.compose_ahead import compose_in_child, worthwhile

OVERRIDES = ["data=regression", "optimizer=sgd", "trainer.max_steps=3", "clip=0.5"]

pytestmark = pytest.mark.skipif(not worthwhile(), reason="needs os.fork and a second core")


def compose_here(overrides: list[str]):
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        return compose("config", overrides=overrides, return_hydra_config=True)


@pytest.fixture(autouse=True)
def restore_hydras_composition(monkeypatch):
    monkeypatch.setattr(ConfigLoaderImpl, "load_configuration", ConfigLoaderImpl.load_configuration)


def refuse_to_compose(*args, **kwargs):
    raise AssertionError("composed here, not in the child")


def test_the_childs_config_is_taken_instead_of_composing_again(monkeypatch):
    expected = OmegaConf.to_container(compose_here(OVERRIDES))
    compose_in_child(lambda: compose_here(OVERRIDES)).install()
    monkeypatch.setattr(ConfigLoaderImpl, "_load_configuration_impl", refuse_to_compose)

    config = compose_here(OVERRIDES)

    assert OmegaConf.to_container(config) == expected
    assert config.clip == 0.5 and config.optimizer._target_ == "torch.optim.SGD"
    with pytest.raises(ValidationError):  # still the typed schema
        config.accumulate = "two"
    with pytest.raises(AssertionError, match="composed here"):  # one composition only
        compose_here(OVERRIDES)


def test_other_arguments_compose_here():
    compose_in_child(lambda: compose_here(["seed=1"])).install()
    assert compose_here(["seed=2"]).seed == 2


def test_a_child_that_fails_leaves_the_error_to_hydra_here():
    compose_in_child(lambda: compose_here(["model=nope"])).install()
    assert ConfigLoaderImpl.load_configuration.__name__ == "load_configuration"
    with pytest.raises(MissingConfigException, match="model/nope"):
        compose_here(["model=nope"])


def test_a_run_records_the_same_config_composed_ahead_or_not(tmp_path):
    records = {}
    for setting in ("1", "0"):
        run_dir = tmp_path / f"run{setting}"
        result = run_cli(
            "train", *OVERRIDES, "trainer.max_steps=1", "checkpoint=none", f"hydra.run.dir={run_dir}",
            cwd=tmp_path, env={"RUNNER_COMPOSE_AHEAD": setting},
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        records[setting] = {
            name: (run_dir / ".hydra" / name).read_text().replace(str(run_dir), "<run dir>")
            for name in ("config.yaml", "hydra.yaml", "overrides.yaml")
        }
        assert "done: step=1" in (run_dir / "train.log").read_text()
    assert records["1"] == records["0"]


def test_an_option_runner_does_not_ship_composes_in_the_run_for_an_immediate_error():
    assert picks_an_unshipped_option(["model=nope"])
    assert picks_an_unshipped_option(["clip=0.5", "+optimizer@extra=nadam"])
    assert not picks_an_unshipped_option(["model=mlp", "data=text", "hparams_search=null", "clip=0.5"])
    assert not picks_an_unshipped_option(["~scheduler", "hydra/launcher=joblib", "model.hidden=[8]"])
