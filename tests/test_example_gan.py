"""The worked example in examples/gan/: pytorch/examples' DCGAN on the digits, two optimizers and a
step the model writes (training/manual_step.py), equal to the example's own hand loop bit for bit;
with accumulation and a clip per optimizer, equal to a hand loop doing the same; killed and resumed,
and under torchrun, exact."""

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import REPO, composed, read_scalars, run_cli
from hydra.utils import instantiate

from runner.config.errors import ConfigError
from runner.data import load_digits
from runner.experiment.setup import build_optimizer, prepare
from runner.tools.doctor import PASS, SKIP, Setup, run_checks

EXAMPLE = REPO / "examples" / "gan"
EXPERIMENT = (f"hydra.searchpath=[file://{EXAMPLE / 'conf'}]", "+experiment=gan", "precision=fp32",
              "trainer.log_every_n_steps=1")  # fmt: skip
PARTS = ("discriminator", "generator")


@pytest.fixture
def train_example(train_here, monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE))
    return lambda *overrides, **kwargs: train_here(*EXPERIMENT, *overrides, **kwargs)


def last_checkpoint(run_dir: Path) -> dict:
    return torch.load(run_dir / "checkpoints" / "last.pt")


def assert_same_weights(state_dict: dict, expected: dict) -> None:
    assert state_dict.keys() == expected.keys()
    for key, tensor in expected.items():
        assert torch.equal(state_dict[key], tensor), key


def test_runner_trains_the_dcgan_exactly_as_the_examples_hand_loop(train_example):
    """25 steps: past the first epoch's short last batch (1438 = 22 x 64 + 30) and its validation."""
    from gan.hand_loop import train_by_hand

    run_dir = train_example("trainer.max_steps=25")
    model, losses = train_by_hand(25)
    scalars = read_scalars(run_dir)
    assert [value for _, value in scalars["train/loss_d"]] == [loss_d for loss_d, _ in losses]
    assert [value for _, value in scalars["train/loss_g"]] == [loss_g for _, loss_g in losses]
    checkpoint = last_checkpoint(run_dir)
    assert_same_weights(checkpoint["model_state_dict"], model.state_dict())
    # Every optimizer's and scheduler's state, by name; each part's rate and gradient norms logged.
    assert set(checkpoint["optimizer_state_dict"]) == set(PARTS)
    assert set(checkpoint["scheduler_state_dict"]) == set(PARTS)
    for part in PARTS:
        assert [value for _, value in scalars[f"train/lr/{part}"]] == pytest.approx([0.0002] * 25)
        norms = scalars[f"train/grad_norm/{part}"]
        assert len(norms) == 25 and all(value > 0 for _, value in norms)
        assert scalars[f"train/grad_norm_clipped/{part}"] == norms  # clip=null, as dcgan/main.py


def hand_loop_with_accumulation(steps: int, accumulate: int, clip_d: float) -> tuple[dict, list[float]]:
    """The DCGAN step as runner's handles define accumulate=k: each micro-batch's losses weighted by
    its share of the window's samples, backward into the named part only, each update on the window's
    last micro-batch (D's clipped at ``clip_d``)."""
    from gan.models import DCGAN, FAKE, REAL, to_tanh_range

    torch.manual_seed(0)
    model = DCGAN()
    net_g, net_d, criterion = model.generator, model.discriminator, model.criterion
    optimizer_d = torch.optim.Adam(net_d.parameters(), lr=0.0002, betas=(0.5, 0.999))
    optimizer_g = torch.optim.Adam(net_g.parameters(), lr=0.0002, betas=(0.5, 0.999))
    train_set, _ = load_digits()
    windows = []
    for epoch in range(2):
        order = torch.randperm(len(train_set), generator=torch.Generator().manual_seed(epoch)).tolist()
        batches = list(torch.utils.data.DataLoader(train_set, 64, sampler=order, generator=torch.Generator()))
        windows += [batches[start : start + accumulate] for start in range(0, len(batches), accumulate)]
    losses_d = []
    for window in windows[:steps]:
        net_d.zero_grad(), net_g.zero_grad()
        total = sum(len(images) for images, _ in window)
        window_loss_d = 0.0
        for index, (images, _) in enumerate(window):
            share = len(images) / total
            last = index == len(window) - 1
            real = to_tanh_range(images)
            label = torch.full((len(real),), REAL)
            loss_d_real = criterion(net_d(real), label)
            (loss_d_real * share).backward(inputs=list(net_d.parameters()))
            fake = net_g(torch.randn(len(real), model.nz, 1, 1))
            label.fill_(FAKE)
            loss_d_fake = criterion(net_d(fake.detach()), label)
            (loss_d_fake * share).backward(inputs=list(net_d.parameters()))
            if last:
                torch.nn.utils.clip_grad_norm_(net_d.parameters(), clip_d)
                optimizer_d.step()
                optimizer_d.zero_grad()
            label.fill_(REAL)
            loss_g = criterion(net_d(fake), label)
            (loss_g * share).backward(inputs=list(net_g.parameters()))
            if last:
                optimizer_g.step()
                optimizer_g.zero_grad()
            window_loss_d = window_loss_d + (loss_d_real + loss_d_fake).detach() * share
        losses_d.append(float(window_loss_d))
    return model.state_dict(), losses_d


def test_accumulation_and_a_clip_per_optimizer_equal_a_hand_loop_doing_the_same(train_example):
    """accumulate=2 over 13 steps: the first epoch's 23 micro-batches end in a window of one."""
    run_dir = train_example("trainer.max_steps=13", "accumulate=2", "+optimizers.discriminator.clip=0.05")
    weights, losses_d = hand_loop_with_accumulation(13, 2, 0.05)
    assert_same_weights(last_checkpoint(run_dir)["model_state_dict"], weights)
    scalars = read_scalars(run_dir)
    assert [value for _, value in scalars["train/loss_d"]] == pytest.approx(losses_d, rel=1e-6)
    clipped = [value for _, value in scalars["train/grad_norm_clipped/discriminator"]]
    assert max(clipped) == pytest.approx(0.05, rel=1e-4)
    assert max(value for _, value in scalars["train/grad_norm/discriminator"]) > 0.05


def test_each_optimizer_has_its_scheduler_the_runs_or_its_own(train_example):
    run_dir = train_example(
        "trainer.max_steps=4", "scheduler=cosine", "+optimizers.generator.scheduler.name=none"
    )
    scalars = read_scalars(run_dir)
    cosine = [value for _, value in scalars["train/lr/discriminator"]]
    assert (
        cosine[0] == pytest.approx(0.0002) and cosine == sorted(cosine, reverse=True) and cosine[-1] < 0.0001
    )
    assert [value for _, value in scalars["train/lr/generator"]] == pytest.approx([0.0002] * 4)
    assert last_checkpoint(run_dir)["scheduler_state_dict"]["discriminator"]["last_epoch"] == 4


def test_optimizers_that_do_not_fit_the_model_are_refused_in_one_line(train_example, train_here):
    unmatched = r"optimizers.generator: generater.\* matches no parameter of the model; .* closest names: "
    with pytest.raises(ConfigError, match=unmatched + r"generator\."):
        train_example("optimizers.generator.params=generater.*")
    with pytest.raises(ConfigError, match=r"optimizers: 4 trainable parameters are in no optimizer's params "
                                          r"\(discriminator.main.2.weight, "):  # fmt: skip
        train_example("optimizers.discriminator.params=discriminator.main.0.*")
    with pytest.raises(ConfigError, match=r"optimizers.generator.params: discriminator.main.0.weight is "
                                          r"also in optimizers.discriminator"):  # fmt: skip
        train_example("optimizers.generator.params=[generator.*,discriminator.main.0.*]")
    with pytest.raises(ConfigError, match=r"has no training_step\(batch, step\) method"):
        train_here(
            "+optimizers.all.params=*", "+optimizers.all._target_=torch.optim.SGD", "+optimizers.all.lr=0.1"
        )


@pytest.mark.parametrize(
    ("override", "given"),
    [("+optimizers.generator.scheduler=cosine", "cosine"),
     ("+optimizers.generator.scheduler.warmup_steps=5", "{'warmup_steps': 5}")],
)  # fmt: skip
def test_an_optimizers_own_scheduler_that_is_not_a_whole_scheduler_config_is_refused_by_name(
    train_example, tmp_path, override, given
):
    with pytest.raises(
        ConfigError, match=r"^optimizers.generator.scheduler=(.+): .*name \(none, cosine, step\) or _target_"
    ) as refused:
        train_example(override)
    assert refused.value.args[0].split("=", 1)[1].startswith(f"{given}: ")
    assert not list((tmp_path / "run").iterdir())


def test_optimizer_param_groups_with_several_optimizers_is_refused_not_ignored(train_example, tmp_path):
    """The run's one optimizer is not built with optimizers: its groups would be dropped silently."""
    with pytest.raises(ConfigError, match=r"^optimizer.param_groups: .*\(optimizers.<name>.params\)"):
        train_example("+optimizer.param_groups=[{params: generator.*, lr: 0.1}]")
    assert not list((tmp_path / "run").iterdir())


def test_an_optimizer_whose_part_is_frozen_is_refused_naming_its_params_and_freeze(train_example):
    with pytest.raises(ConfigError, match=r"^optimizers.discriminator.params: discriminator.\* match only "
                                          r"frozen parameters \(freeze\)"):  # fmt: skip
        train_example("freeze=[discriminator.*]")


def test_doctor_checks_the_gan_per_optimizer_and_says_why_it_skips_the_overfit_check(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE))
    config = composed(*EXPERIMENT)
    prepared = prepare(config, instantiate, config.seed)
    results = run_checks(
        Setup.of(config, prepared, lambda model: build_optimizer(instantiate, config, model))
    )
    assert [result.status for result in results] == [PASS] * 7 + [SKIP]
    assert results[5].found == (
        "9 of 9 trainable tensors changed (lr 0.0002) (discriminator 5 of 5, generator 4 of 4)"
    )
    assert results[7].found.startswith(
        "a step the model writes, with optimizers discriminator, generator, has no one loss that must fall "
        "on one batch (a GAN's oppose each other); its step ran 100 times: loss_d 1.392 -> "
    )


GAN_ENV = {
    **os.environ, "OMP_NUM_THREADS": "1",
    "PYTHONPATH": os.pathsep.join([str(EXAMPLE), str(REPO / "tests" / "plugins"),
                                   os.environ.get("PYTHONPATH", "")]),
}  # fmt: skip
GAN_RUN = (*EXPERIMENT, "trainer.max_steps=30", "checkpoint.every_n_steps=1", "checkpoint.keep_last=100",
           "trainer.val_every_n_steps=7", "model.ngf=8", "model.ndf=8")  # fmt: skip


@pytest.mark.slow
def test_a_gan_killed_mid_run_resumes_bit_identical(tmp_path):
    def start(run_dir: Path) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", "runner", "train", *GAN_RUN, f"hydra.run.dir={run_dir}"],
            cwd=tmp_path, env=GAN_ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

    reference = start(tmp_path / "reference")
    assert reference.wait(timeout=240) == 0, reference.stderr.read()
    killed = start(tmp_path / "killed")
    target = tmp_path / "killed" / "checkpoints" / f"step_{random.randint(3, 26):08d}.pt"
    deadline = time.monotonic() + 120
    while not target.exists():
        assert killed.poll() is None and time.monotonic() < deadline, killed.stderr.read()
        time.sleep(0.002)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    assert not (tmp_path / "killed" / "checkpoints" / "last.pt").exists()
    resumed = run_cli("train", f"resume={tmp_path / 'killed'}", EXPERIMENT[0], cwd=tmp_path, env=GAN_ENV)
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed from" in resumed.stdout
    ours, theirs = last_checkpoint(tmp_path / "killed"), last_checkpoint(tmp_path / "reference")
    assert ours["global_step"] == theirs["global_step"] == 30
    assert_same_weights(ours["model_state_dict"], theirs["model_state_dict"])
    for part in PARTS:
        for index, values in theirs["optimizer_state_dict"][part]["state"].items():
            for name, value in values.items():
                assert torch.equal(ours["optimizer_state_dict"][part]["state"][index][name], value), (
                    part,
                    name,
                )
    ours_scalars, theirs_scalars = read_scalars(tmp_path / "killed"), read_scalars(tmp_path / "reference")
    for tag in ("train/loss_d", "train/loss_g", "train/grad_norm/generator", "val/loss"):
        assert ours_scalars[tag] == theirs_scalars[tag], tag


@pytest.mark.slow
def test_under_torchrun_every_part_is_the_same_on_both_ranks_after_each_step(tmp_path):
    """Each rank trains on its own half of every batch: only the averaged gradients keep them equal."""
    folder = tmp_path / "weights"
    folder.mkdir()
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m",
               "runner", "train", *EXPERIMENT, "trainer.max_steps=6", "accumulate=2", "data.batch_size=32",
               "+callbacks.rank_weights._target_=rank_weights.RankWeights",
               f"+callbacks.rank_weights.folder={folder}", f"hydra.run.dir={tmp_path / 'run'}"]  # fmt: skip
    result = subprocess.run(command, cwd=tmp_path, env=GAN_ENV, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr
    assert "each optimizer's gradients averaged at its update" in " ".join(result.stdout.split())
    for step in range(1, 7):
        rank0 = torch.load(folder / f"rank0_step{step}.pt")
        rank1 = torch.load(folder / f"rank1_step{step}.pt")
        assert_same_weights(rank1, rank0)
        assert {name.split(".")[0] for name in rank0} == set(PARTS)
    start = torch.load(folder / "rank0_step1.pt")
    assert not all(
        torch.equal(start[name], tensor) for name, tensor in torch.load(folder / "rank0_step6.pt").items()
    )
