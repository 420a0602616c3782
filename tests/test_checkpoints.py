"""Checkpoint format, durability and safe loading, in-process."""

import math
import pickle
import shlex
import sys
from pathlib import Path

import pytest
import torch
from conftest import TINY
from torch import nn

from runner.checkpoint.files import CheckpointError, atomic_save, check_state_dict_fits, load_checkpoint
from runner.checkpoint.policy import PeriodicCheckpointer
from runner.checkpoint.state import TrainState
from runner.training.validation import improves


class FailsToPickle:
    def __reduce__(self):
        raise pickle.PicklingError("refusing to pickle")


def test_failed_write_leaves_the_previous_file_whole(tmp_path):
    path = tmp_path / "last.pt"
    atomic_save({"weights": torch.arange(4)}, path)
    before = path.read_bytes()
    with pytest.raises(pickle.PicklingError):
        atomic_save({"weights": torch.arange(8), "bad": FailsToPickle()}, path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]  # no temporary left behind


def test_periodic_files_are_pruned_only_to_keep_last(tmp_path):
    checkpointer = PeriodicCheckpointer(
        tmp_path, lambda state: {"global_step": state.step}, every_n_steps=2, every_n_epochs=None,
        keep_last=2, save_best=True,
    )  # fmt: skip
    for step in range(1, 8):
        state = TrainState(step=step)
        checkpointer.after_step(state)
        checkpointer.after_validation(state, improved=step == 3)
    checkpointer.save_last(TrainState(step=7))
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "best.pt", "last.pt", "step_00000004.pt", "step_00000006.pt",
    ]  # fmt: skip
    assert torch.load(tmp_path / "best.pt")["global_step"] == 3
    assert len(checkpointer.save_seconds) == 5


def test_nan_never_counts_as_best():
    assert not improves(math.nan, None, "min")
    assert not improves(math.nan, 1.0, "max")
    assert improves(0.5, 1.0, "min") and not improves(1.5, 1.0, "min")
    assert improves(0.9, 0.8, "max")


def test_shape_and_key_mismatches_are_named(tmp_path):
    saved = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).state_dict()
    other = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2), nn.Linear(2, 2))
    with pytest.raises(CheckpointError) as error:
        check_state_dict_fits(other, saved, tmp_path / "x.pt")
    message = str(error.value)
    assert "missing keys: 3.weight, 3.bias" in message
    assert "shape mismatches: 0.weight (checkpoint [8, 4], model [16, 4])" in message
    assert "state_dict().keys()" in message


def test_truncated_file_is_named(tmp_path):
    path = tmp_path / "step.pt"
    torch.save({"model_state_dict": {"w": torch.zeros(1000)}}, path)
    path.write_bytes(path.read_bytes()[:300])
    with pytest.raises(CheckpointError, match=r"step\.pt is truncated or corrupted"):
        load_checkpoint(path)


# Every key a checkpoint must hold, with small values (what checkpoint_payload writes for a real run).
MINIMAL = {
    "optimizer_state_dict": {}, "scheduler_state_dict": {}, "scaler_state_dict": {},
    **TrainState(step=3, epoch=1, best_val=0.5).state_dict(), "stop_reason": None, "rng_states": {},
    "config": {}, "seed": 0, "world_size": 1, "planned": {},
}  # fmt: skip


@pytest.mark.parametrize("where", ["weight", "config"])
def test_a_change_on_disk_is_caught_by_the_checksum(tmp_path, where):
    """torch's reader does not check the archive's CRCs: without the checksum these files load."""
    path = tmp_path / "last.pt"
    weight = torch.linspace(-1, 1, 4096).reshape(64, 64)
    atomic_save(
        {
            "model_state_dict": {"w": weight},
            **MINIMAL,
            "config": {"model": {"_target_": "runner.models.mlp"}},
        },
        path,
    )
    data = bytearray(path.read_bytes())
    if where == "weight":
        start = data.find(weight.numpy().tobytes()[:64]) + 1000
        data[start : start + 16] = bytes(byte ^ 0xFF for byte in data[start : start + 16])
    else:
        data = data.replace(b"runner.models.mlp", b"pathlib.Path.home")
    path.write_bytes(data)
    assert torch.load(path, weights_only=True)["global_step"] == 3  # torch alone takes it
    with pytest.raises(
        CheckpointError, match=r"last\.pt is corrupted: its contents do not match the checksum"
    ):
        load_checkpoint(path)


def test_a_checkpoint_without_its_checksum_is_refused(tmp_path):
    """Every checkpoint runner writes carries one; a file without it cannot be checked, so it is not
    loaded (a file changed on disk would otherwise load as it is)."""
    path = tmp_path / "last.pt"
    torch.save({"model_state_dict": {"w": torch.ones(3)}, **MINIMAL}, path)
    with pytest.raises(
        CheckpointError, match=r"last\.pt is not a valid runner checkpoint: it has no checksum"
    ):
        load_checkpoint(path)
    atomic_save({"model_state_dict": {"w": torch.ones(3)}, **MINIMAL}, path)
    loaded = load_checkpoint(path)
    assert loaded["global_step"] == 3
    assert "checksum" not in loaded  # what the loader returns is what was saved


def test_a_checkpoint_that_lacks_a_key_is_named_before_anything_reads_it(tmp_path):
    path = tmp_path / "last.pt"
    atomic_save(
        {key: value for key, value in {"model_state_dict": {}, **MINIMAL}.items() if key != "planned"}, path
    )
    with pytest.raises(CheckpointError, match=r"last\.pt is not a runner checkpoint \(it lacks planned\)"):
        load_checkpoint(path)


@pytest.mark.parametrize(
    "content",
    [b"# A README\n\nSome text.\n", bytes(range(256)) * 4, b"root:x:0:0:root:/root:/bin/bash\n", b""],
)
def test_a_file_that_is_no_checkpoint_is_called_that(tmp_path, content):
    path = tmp_path / "README.md"
    path.write_bytes(content)
    with pytest.raises(CheckpointError) as error:
        load_checkpoint(path)
    assert "is not a checkpoint file" in str(error.value)
    assert "pickled" not in str(error.value)


def test_compiled_runs_save_plain_keys():
    """The model is compiled in place (after the first eager steps): checkpoints save its plain keys,
    so they load with or without compile (compilation itself is lazy: nothing compiles in this test)."""
    from runner.checkpoint.contents import Stateful, checkpoint_payload
    from runner.training.precision import resolve_precision
    from runner.training.schedules import build_scheduler
    from runner.training.speed import apply_speed_settings

    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    plan = apply_speed_settings(
        model, torch.device("cpu"), tf32=True, channels_last=False, compile_model=True
    )
    for steps_done in range(4):  # the step boundaries: compiled after 3 eager steps
        plan.compile(steps_done)
    assert plan.forward_model is model and plan.compile.compiled_after == 3
    assert model._compiled_call_impl is not None  # nn.Module.compile's, in place
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = resolve_precision("fp32", torch.device("cpu")).scaler
    scheduler = build_scheduler(optimizer, "none", 1, 0, 0.0, 1, 1.0)
    payload = checkpoint_payload(Stateful(model, optimizer, scheduler, scaler), TrainState().state_dict(), {})
    fresh = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    fresh.load_state_dict(payload["model_state_dict"])  # strict, no prefixes
    plan_again = apply_speed_settings(fresh, torch.device("cpu"), True, False, True)
    for steps_done in range(4):
        plan_again.compile(steps_done)
    plan_again.forward_model.load_state_dict(payload["model_state_dict"])


def test_the_periodic_file_just_written_is_never_pruned(tmp_path):
    """A run resumed from an older step finds higher-numbered files of the future it abandoned."""
    atomic_save({"global_step": 10}, tmp_path / "step_00000010.pt")
    checkpointer = PeriodicCheckpointer(
        tmp_path, lambda state: {"global_step": state.step}, every_n_steps=2, every_n_epochs=None,
        keep_last=1, save_best=False,
    )  # fmt: skip
    checkpointer.after_step(TrainState(step=2))
    checkpointer.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_00000002.pt"]


@pytest.mark.parametrize(
    ("command_line", "printed"),
    [
        (
            ["/venv/bin/python", "/venv/bin/torchrun", "--standalone", "--nproc_per_node=4", "-m", "runner",
             "train", "model=cnn"],
            "torchrun --standalone --nproc_per_node=4 -m runner train resume=/runs/a",
        ),
        (
            ["/usr/bin/python3", "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node", "8",
             "--rdzv-backend=c10d", "--rdzv-endpoint=node0:29400", "--rdzv-id=job 7", "--max-restarts=3",
             "-m", "runner", "train", "data=text"],
            "python -m torch.distributed.run --nnodes=2 --nproc-per-node 8 --rdzv-backend=c10d "
            "--rdzv-endpoint=node0:29400 '--rdzv-id=job 7' --max-restarts=3 -m runner train resume=/runs/a",
        ),
    ],
)  # fmt: skip
def test_the_resume_command_under_torchrun_keeps_torchruns_options(command_line, printed):
    """What the interrupted run's torchrun was given (its agent's command line), the script replaced."""
    from runner.experiment.relaunch import torchrun_options

    launcher, options = torchrun_options(command_line)
    assert " ".join([launcher, shlex.join([*options, "-m", "runner", "train", "resume=/runs/a"])]) == printed


def test_the_resume_command_is_torchruns_wherever_torchrun_started_the_run(monkeypatch):
    from runner.experiment.relaunch import resume_command, torchrun_options

    monkeypatch.delenv("PYTHONPATH", raising=False)
    assert torchrun_options(["/usr/bin/python", "-m", "runner", "train"]) is None
    assert resume_command(Path("/runs/a")) == "python -m runner train resume=/runs/a"
    # Under torchrun, where its agent's command line cannot be read (here the parent is not torchrun):
    # rebuilt from what torchrun exports to its workers.
    for name, value in {"TORCHELASTIC_RUN_ID": "x", "LOCAL_WORLD_SIZE": "2", "WORLD_SIZE": "2"}.items():
        monkeypatch.setenv(name, value)
    assert resume_command(Path("/runs/a")) == (
        "torchrun --standalone --nproc_per_node=2 -m runner train resume=/runs/a"
    )


def test_the_resume_command_gives_the_runs_config_folders_and_targets_again(monkeypatch):
    """A resume refuses to take config folders or code to build from a run directory: the printed
    command names those this run was given; the other overrides it takes from the run directory."""
    from runner.experiment.relaunch import resume_command

    monkeypatch.delenv("PYTHONPATH", raising=False)
    searchpath = "hydra.searchpath=[file://examples/word_lm/conf]"
    monkeypatch.setattr(sys, "argv", ["runner", "train", searchpath, "+experiment=word_lm", "seed=3"])
    assert resume_command(Path("/runs/a")) == f"python -m runner train resume=/runs/a '{searchpath}'"
    own = ["model._target_=mine.Net", "data.sampler={_target_: mine.Order}"]
    monkeypatch.setattr(sys, "argv", ["runner", "train", own[0], "seed=3", own[1]])
    assert resume_command(Path("/runs/a")) == "python -m runner train resume=/runs/a " + shlex.join(own)
    # Outside a project, the code the run imported is on the PYTHONPATH it was started with: pasted
    # into another shell, the command needs it.
    monkeypatch.setenv("PYTHONPATH", "examples/word lm")
    monkeypatch.delenv("RUNNER_PROJECT", raising=False)
    assert resume_command(Path("/runs/a")).startswith("PYTHONPATH='examples/word lm' python -m runner train")


def evaluated(capsys, *arguments: str) -> tuple[str, str]:
    """What ``python -m runner eval ARGUMENTS`` prints: its line, and its warnings."""
    from runner.cli.main import main

    main(["eval", *arguments])
    printed = capsys.readouterr()
    return printed.out, printed.err


def test_eval_of_a_run_directory_evaluates_its_best_checkpoint(train_here, capsys):
    """As resume and consolidate take a run directory: eval takes its best.pt (the checkpoint kept
    for its monitored metric), or its newest valid checkpoint where it has none."""
    run_dir = train_here(*TINY)
    best = run_dir / "checkpoints" / "best.pt"
    of_file, _ = evaluated(capsys, f"ckpt={best}", "device=cpu")
    assert of_file.startswith(f"checkpoint {best} step ")
    assert evaluated(capsys, f"ckpt={run_dir}", "device=cpu") == (of_file, "")
    assert evaluated(capsys, f"ckpt={run_dir / 'checkpoints'}", "device=cpu") == (of_file, "")
    best.write_bytes(b"damaged")
    out, warned = evaluated(capsys, f"ckpt={run_dir}", "device=cpu")
    assert out.startswith(f"checkpoint {run_dir / 'checkpoints' / 'last.pt'} step 4 ")
    assert warned.startswith(f"runner: warning: ckpt={run_dir}: skipping ")


def test_eval_of_an_empty_ckpt_is_refused_rather_than_taken_as_this_folder(train_here, capsys, monkeypatch):
    run_dir = train_here(*TINY)
    monkeypatch.chdir(run_dir)  # a run directory: "ckpt=" must not read as "."
    with pytest.raises(SystemExit) as exited:
        evaluated(capsys, "ckpt=")
    assert exited.value.code == 2
    assert (
        capsys.readouterr().err
        == "runner: error: ckpt= names nothing; give a checkpoint file or a run directory\n"
    )
