"""Schedulers whose ``step`` needs an argument: timm's (``step(epoch)``, ``step_update(num_updates)``)
are driven as timm's own loop drives them, with no adapter, and resume bit for bit; one whose ``step``
needs something runner cannot give is refused in one line before the run writes anything. In-process,
with the real composed config."""

import importlib
import logging
from pathlib import Path

import pytest
import torch
from conftest import composed, read_scalars
from hydra.utils import instantiate

from runner.config.errors import ConfigError
from runner.experiment.train import train

PLUGINS = Path(__file__).parent / "plugins"
STEPS_PER_EPOCH, EPOCHS, LR = 5, 3, 0.01  # any_model.pairs: 70 samples in batches of 16


def timm_or_skip() -> str:
    """timm's own scheduler where timm imports (it imports torchvision, whose PyPI wheels need a CUDA
    torch: not on a CPU-only machine)."""
    try:
        importlib.import_module("timm.scheduler")
    except Exception as error:  # torchvision's operators missing raise a RuntimeError, not an ImportError
        pytest.skip(f"timm does not import here ({type(error).__name__}): the stand-in covers its interface")
    return "timm.scheduler.CosineLRScheduler"


@pytest.fixture
def run(tmp_path, caplog, monkeypatch):
    caplog.set_level(logging.INFO, logger="runner")
    monkeypatch.syspath_prepend(str(PLUGINS))

    def start(*overrides: str, scheduler: dict, run_dir: Path | None = None) -> Path:
        config = composed("data=classification", "data.batch_size=16", "trainer.log_every_n_steps=1",
                          "seed=3", f"optimizer.lr={LR}", *overrides)  # fmt: skip
        config.model = {"_target_": "any_model.mlp", "dropout": 0.2}
        config.data.dataset = {"_target_": "any_model.pairs"}
        config.scheduler = scheduler
        run_dir = run_dir or tmp_path / "run"
        run_dir.mkdir(parents=True, exist_ok=True)
        train(config, run_dir, build=instantiate)
        return run_dir

    return start


def timm_loop_rates(target: str, **arguments) -> list[float]:
    """The rate each optimizer step uses in timm's train.py: ``step_update(num_updates=...)`` after each
    update, ``step(epoch + 1, metric)`` after each epoch."""
    module, name = target.rsplit(".", 1)
    optimizer = torch.optim.Adam([torch.zeros(1, requires_grad=True)], lr=LR)
    scheduler = getattr(importlib.import_module(module), name)(optimizer, **arguments)
    rates, updates = [], 0
    for epoch in range(EPOCHS):
        for _ in range(STEPS_PER_EPOCH):
            rates.append(optimizer.param_groups[0]["lr"])
            updates += 1
            scheduler.step_update(num_updates=updates)
        scheduler.step(epoch + 1, 0.5)
    return rates


PER_UPDATE = {"t_initial": EPOCHS * STEPS_PER_EPOCH, "warmup_t": 3, "warmup_lr_init": 1e-4, "lr_min": 1e-5,
              "t_in_epochs": False}  # fmt: skip
PER_EPOCH = {"t_initial": EPOCHS, "warmup_t": 1, "warmup_lr_init": 1e-3}


@pytest.mark.parametrize("arguments", [PER_UPDATE, PER_EPOCH], ids=["per_update", "per_epoch"])
@pytest.mark.parametrize("target", ["timm_like.CosineLRScheduler", "timm"])
def test_a_timm_scheduler_is_driven_as_timms_loop_drives_it(run, caplog, target, arguments):
    if target == "timm":
        target = timm_or_skip()
    run_dir = run(f"trainer.max_epochs={EPOCHS}", scheduler={"_target_": target, **arguments})
    rates = [value for _, value in read_scalars(run_dir)["train/lr"]]
    expected = timm_loop_rates(target, **arguments)
    assert rates == pytest.approx(expected, rel=1e-6)
    assert len(set(rates)) > 2  # the rate moved
    assert f"{target}, as timm's loop steps it: step_update(num_updates)" in caplog.text


def test_a_timm_scheduler_resumes_bit_for_bit(run, tmp_path):
    scheduler = {"_target_": "timm_like.CosineLRScheduler", **PER_UPDATE}
    straight = run("trainer.max_steps=15", scheduler=scheduler, run_dir=tmp_path / "a")
    run("trainer.max_steps=7", scheduler=scheduler, run_dir=tmp_path / "b")  # stopped mid-epoch
    resumed = run(
        "trainer.max_steps=15", f"resume={tmp_path / 'b'}", scheduler=scheduler, run_dir=tmp_path / "b"
    )
    first, second = (torch.load(d / "checkpoints" / "last.pt") for d in (straight, resumed))
    for name, value in first["model_state_dict"].items():
        assert torch.equal(second["model_state_dict"][name], value), name
    assert first["scheduler_state_dict"] == second["scheduler_state_dict"]
    assert read_scalars(straight)["train/lr"][7:] == read_scalars(resumed)["train/lr"][7:]


def test_a_plateau_scheduler_of_another_library_steps_on_its_monitor(run):
    """``step(metric)`` with scheduler.monitor: stepped after each validation with that value."""
    run_dir = run("trainer.max_epochs=3", "optimizer.lr=1e-7",
                  scheduler={"_target_": "timm_like.HalvedOnCall", "monitor": "val/loss"})  # fmt: skip
    rates = [value for _, value in read_scalars(run_dir)["train/lr"]]
    assert rates == pytest.approx([1e-7] * 10 + [5e-8] * 5)


@pytest.mark.parametrize(
    ("scheduler", "message"),
    [
        ({"_target_": "timm_like.EpochOnly"},
         "scheduler._target_=timm_like.EpochOnly: its step() needs epoch, "),
        ({"_target_": "timm_like.HalvedOnCall"},
         "scheduler._target_=timm_like.HalvedOnCall: its step() needs metric, which runner can give only to "
         "step(metric) after each validation (set scheduler.monitor"),
        ({"_target_": "timm_like.CosineLRScheduler", "t_initial": 3, "interval": "epoch"},
         "scheduler.interval=epoch: timm_like.CosineLRScheduler is stepped as timm's loop steps it"),
    ],
)  # fmt: skip
def test_a_step_runner_cannot_call_is_refused_in_one_line_before_the_run_writes(
    run, tmp_path, scheduler, message
):
    run_dir = tmp_path / "refused"
    with pytest.raises(ConfigError) as refused:
        run("trainer.max_epochs=2", scheduler=scheduler, run_dir=run_dir)
    assert str(refused.value).startswith(message), refused.value
    assert "\n" not in str(refused.value)
    assert not list(run_dir.iterdir())  # nothing written
