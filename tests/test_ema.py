"""``callbacks.ema.warmup``: the decay of diffusers' ``EMAModel`` (``(1 + s) / (10 + s)``, or with
``power`` its ``use_ema_warmup`` form), capped at ``decay``, counted in the checkpoint so a resumed run
continues it exactly. In-process with the real composed config."""

import logging
from pathlib import Path

import pytest
import torch
from conftest import composed
from hydra.utils import instantiate

from runner.config.errors import ConfigError
from runner.experiment.train import train
from runner.training.callbacks import EMA, Context

PLUGINS = Path(__file__).parent / "plugins"


@pytest.fixture
def run(tmp_path, caplog, monkeypatch):
    caplog.set_level(logging.INFO, logger="runner")
    monkeypatch.syspath_prepend(str(PLUGINS))

    def start(*overrides: str, run_dir: Path | None = None) -> Path:
        config = composed("data=classification", "data.batch_size=16", "seed=3", "callbacks=ema", *overrides)
        config.model = {"_target_": "any_model.mlp", "dropout": 0.2}
        config.data.dataset = {"_target_": "any_model.pairs"}
        run_dir = run_dir or tmp_path / "run"
        run_dir.mkdir(parents=True, exist_ok=True)
        train(config, run_dir, build=instantiate)
        return run_dir

    return start


@pytest.mark.parametrize(
    "settings",
    [{"decay": 0.999}, {"decay": 0.9999, "power": 2 / 3}, {"decay": 0.995, "power": 0.75, "inv_gamma": 2.0}],
    ids=["diffusers_default", "power_2_3", "power_3_4_inv_gamma_2"],
)
def test_the_warmup_decay_is_diffusers_ema_models_at_every_update(settings):
    ema_model = pytest.importorskip(
        "diffusers.training_utils", reason="diffusers (the diffusers extra)"
    ).EMAModel
    reference = ema_model(
        [torch.nn.Parameter(torch.zeros(1))], decay=settings["decay"], use_ema_warmup="power" in settings,
        inv_gamma=settings.get("inv_gamma", 1.0), power=settings.get("power", 2 / 3),
    )  # fmt: skip
    ours = EMA(warmup=True, **settings)
    assert [ours.decay_at(update) for update in range(1, 3001)] == [
        reference.get_decay(update) for update in range(1, 3001)
    ]


def test_the_averages_follow_diffusers_ema_model_through_training_steps():
    """The same weights after each step: EMA's averages are diffusers' shadow parameters (lerp_ against
    diffusers' sub_: equal to float32 rounding)."""
    ema_model = pytest.importorskip(
        "diffusers.training_utils", reason="diffusers (the diffusers extra)"
    ).EMAModel
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    reference = ema_model(model.parameters(), decay=0.99)
    ours = EMA(decay=0.99, warmup=True)
    context = Context(model, torch.optim.SGD(model.parameters(), lr=0.1), lambda *_: None)
    ours.on_train_start(context)
    for _ in range(40):
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.add_(torch.randn_like(parameter))
        ours.on_step_end(context)
        reference.step(model.parameters())
    for (name, _), shadow in zip(model.named_parameters(), reference.shadow_params, strict=True):
        torch.testing.assert_close(ours.averages[name], shadow, rtol=1e-6, atol=1e-6)


def test_with_warmup_the_first_update_takes_the_weights_as_they_are(run):
    """diffusers' decay is 0 at the first update: after one step the averages are the weights, bit for
    bit (without the warmup, 0.1% of the way from the initial weights)."""
    checkpoint = torch.load(
        run("callbacks.ema.warmup=true", "trainer.max_steps=1") / "checkpoints" / "last.pt"
    )
    averaged, own = checkpoint["averaged_model_state_dict"], checkpoint["model_state_dict"]
    assert all(torch.equal(averaged[name], own[name]) for name in own)
    assert checkpoint["callbacks_state_dict"]["ema"]["updates"] == 1


def test_a_run_with_the_warmup_resumes_bit_for_bit(run, tmp_path):
    common = ("callbacks.ema.warmup=true", "callbacks.ema.power=0.75", "checkpoint.every_n_steps=4")
    straight = run(*common, "trainer.max_steps=10", run_dir=tmp_path / "a")
    run(*common, "trainer.max_steps=4", run_dir=tmp_path / "b")
    resumed = run(*common, "trainer.max_steps=10", f"resume={tmp_path / 'b'}", run_dir=tmp_path / "b")
    first, second = (torch.load(d / "checkpoints" / "last.pt") for d in (straight, resumed))
    for name, value in first["averaged_model_state_dict"].items():
        assert torch.equal(second["averaged_model_state_dict"][name], value), name
    assert (
        first["callbacks_state_dict"]["ema"]["updates"]
        == second["callbacks_state_dict"]["ema"]["updates"]
        == 10
    )


def test_a_checkpoint_from_before_the_warmup_counts_from_the_runs_step():
    ema = EMA(decay=0.9, warmup=True)
    ema.load_state_dict({"decay": 0.9, "averages": {}})  # written before the count was saved
    model = torch.nn.Linear(2, 2)
    ema.on_train_start(Context(model, torch.optim.SGD(model.parameters(), lr=0.1), lambda *_: None, step=500))
    assert ema.updates == 500 and ema.decay_at(ema.updates + 1) == 0.9


def test_a_power_without_the_warmup_is_refused_in_one_line(run, tmp_path):
    with pytest.raises(ConfigError) as refused:
        run("callbacks.ema.power=0.75", run_dir=tmp_path / "refused")
    message = str(refused.value)
    assert message.startswith(
        "callbacks.ema: runner.training.callbacks.EMA refused decay=0.999, warmup=false"
    )
    assert "ema's power=0.75 shapes its warmup; set warmup=true, or leave power out" in message
    assert "\n" not in message and not list((tmp_path / "refused").iterdir())


EMA_REFUSED = "callbacks.ema: runner.training.callbacks.EMA refused decay=0.999, warmup=true, "


@pytest.mark.parametrize(
    ("override", "expected"),
    [("callbacks.ema.inv_gamma=inf", f"{EMA_REFUSED}inv_gamma=inf, power=null (ValueError: ema takes "
      "inv_gamma, a finite number > 0 (1.0 by default); got inv_gamma=inf)"),
     ("callbacks.ema.inv_gamma=true", f"{EMA_REFUSED}inv_gamma=true, power=null (ValueError: ema takes "
      "inv_gamma, a finite number > 0 (1.0 by default); got inv_gamma=True)"),
     ("callbacks.ema.power=inf", f"{EMA_REFUSED}inv_gamma=1.0, power=inf (ValueError: ema takes power, a "
      "finite number > 0, or null; got power=inf)"),
     ("callbacks.ema.decay=abc", "callbacks.ema: runner.training.callbacks.EMA refused decay=abc, "
      "warmup=true, inv_gamma=1.0, power=null (ValueError: ema takes a decay in (0, 1); got decay=abc)"),
     ("callbacks.ema.inv_gamma=nan", "callbacks.ema.inv_gamma=nan is not allowed; callbacks.ema.inv_gamma "
      "must be a number (NaN compares false with everything")],
)  # fmt: skip
def test_an_ema_setting_that_is_no_finite_number_is_refused_in_one_line_naming_it(
    tmp_path, monkeypatch, capsys, override, expected
):
    """inf passed ``> 0`` before (the warmup's decay became a constant, and the run said nothing), and a
    string decay was a traceback-like line about the _target_."""
    from runner.cli.main import main

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exited:
        main(["train", "callbacks=ema", "callbacks.ema.warmup=true", override, "trainer.max_steps=2"])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"runner: error: {expected}"), err
    assert list(tmp_path.iterdir()) == []
