"""Out of memory in a run (``on_oom``): the micro-batch is halved and the step redone with the math of
the run as configured, or the run stops in one line with ``last.pt`` kept (``training/oom.py``). The
model of ``tests/plugins/oom_model.py`` raises ``torch.OutOfMemoryError`` above a batch size."""

import logging
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import PLUGINS, TINY, composed, read_scalars, run_cli

from runner.checkpoint.state import TrainState, saved_keys
from runner.config.errors import UserError
from runner.experiment.parallel import memory_agreement, oom_policy
from runner.training.distributed import ProcessInfo
from runner.training.manual_step import MODELS_STEP
from runner.training.memory_agreement import Agreement
from runner.training.oom import TAG, OutOfMemoryStop, OutOfMemoryUnsaved, cut, step_within_memory
from runner.training.precision import resolve_precision
from runner.training.step import Learner, train_step

RUNS_OUT = ("model._target_=oom_model.RunsOutAbove", "data.dataset.num_train=128")
AT_8 = (*RUNS_OUT, "+model.limit=8")


def last(run_dir):
    return torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)


def same_weights(first: dict, second: dict) -> bool:
    return all(torch.equal(first[name], second[name]) for name in first) and first.keys() == second.keys()


def test_a_run_that_runs_out_at_32_ends_as_one_configured_8_x_4_also_when_resumed(
    train_here, tmp_path, caplog
):
    """The step's math is kept: the same weights, bit for bit, and the same logged losses. The split is
    in the checkpoint, so the resumed half starts at micro-batch 8 without running out again."""
    split = tmp_path / "split"
    train_here(*TINY, *AT_8, "data.batch_size=32", "trainer.max_steps=3", "checkpoint.every_n_steps=1",
               run_dir=split)  # fmt: skip
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "out of memory at micro-batch 32: continuing with 16 x 2 per step",
        "out of memory at micro-batch 16: continuing with 8 x 4 per step",
    ]
    assert last(split)["micro_batch_size"] == 8
    caplog.clear()
    train_here(*TINY, *AT_8, "data.batch_size=32", "trainer.max_steps=6", "resume=auto", run_dir=split)
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]
    configured = tmp_path / "configured"
    train_here(*TINY, *AT_8, "data.batch_size=8", "accumulate=4", "trainer.max_steps=6", run_dir=configured)
    assert same_weights(last(split)["model_state_dict"], last(configured)["model_state_dict"])
    assert same_weights(
        last(split)["optimizer_state_dict"]["state"][0], last(configured)["optimizer_state_dict"]["state"][0]
    )
    split_scalars, configured_scalars = read_scalars(split), read_scalars(configured)
    assert split_scalars["train/loss"] == configured_scalars["train/loss"]
    assert split_scalars[TAG] == [(1, 16.0), (1, 8.0)]
    assert TAG not in configured_scalars  # logged where a split changes it


def test_a_redo_draws_what_the_window_drew_first_dropout_and_pythons_random_alike(train_here, tmp_path):
    """The redone window restores every random state it began with: a model with dropout that also
    draws from Python's ``random`` ends as the configured 8 x 4 run, bit for bit."""
    draws = ("model.dropout=0.5", "+model.host_noise=true", "trainer.max_steps=4")
    split, configured = tmp_path / "split", tmp_path / "configured"
    train_here(*TINY, *AT_8, *draws, "data.batch_size=32", run_dir=split)
    train_here(*TINY, *AT_8, *draws, "data.batch_size=8", "accumulate=4", run_dir=configured)
    assert same_weights(last(split)["model_state_dict"], last(configured)["model_state_dict"])
    assert read_scalars(split)["train/loss"] == read_scalars(configured)["train/loss"]


def test_validation_splits_its_batches_and_the_run_trains_on_at_that_size(train_here, caplog):
    run_dir = train_here(*TINY, *AT_8, "+model.when=evaluation", "data.batch_size=32")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings[:2] == [
        "out of memory in validation at batch 32: continuing with 16",
        "out of memory in validation at batch 16: continuing with 8",
    ]
    assert last(run_dir)["micro_batch_size"] == 8
    assert read_scalars(run_dir)["val/loss"]


@pytest.mark.parametrize("on_oom", ["raise", "split"])
def test_out_of_memory_that_cannot_be_split_stops_in_one_line_with_last_pt(train_here, tmp_path, on_oom):
    """on_oom=raise at the first one; split when even a micro-batch of one sample runs out (limit 0)."""
    limit = "8" if on_oom == "raise" else "0"
    with pytest.raises(UserError) as stopped:
        train_here(*TINY, *RUNS_OUT, f"+model.limit={limit}", "+model.when=training", "data.batch_size=32",
                   f"on_oom={on_oom}", "trainer.max_steps=2")  # fmt: skip
    message = str(stopped.value)
    assert "\n" not in message and message.startswith("out of memory at micro-batch")
    assert "activation_checkpointing=true" in message and "strategy=fsdp" in message
    assert ("on_oom=raise" in message) == (on_oom == "raise")
    assert last(tmp_path / "run")["global_step"] == 0


def test_a_checkpoint_from_before_the_split_setting_still_loads():
    assert "micro_batch_size" not in saved_keys()  # not required: an older file lacks it
    state = TrainState()
    saved = state.state_dict()
    assert saved["micro_batch_size"] is None
    del saved["micro_batch_size"]
    state.load_state_dict(saved)
    assert state.micro_batch_size is None
    state.load_state_dict({**saved, "micro_batch_size": 16})
    assert state.micro_batch_size == 16


def test_a_batch_is_cut_in_order_into_fresh_micro_batches():
    inputs, targets = torch.arange(10.0).reshape(5, 2), torch.arange(5)
    batch = {"inputs": inputs, "labels": targets, "names": list("abcde"), "scale": torch.tensor(2.0)}
    parts = cut(batch, 2, "labels")
    assert [part["labels"].tolist() for part in parts] == [[0, 1], [2, 3], [4]]
    assert [part["names"] for part in parts] == [["a", "b"], ["c", "d"], ["e"]]
    assert all(part["scale"] is batch["scale"] for part in parts)
    assert parts[1]["inputs"].untyped_storage().data_ptr() != inputs.untyped_storage().data_ptr()
    assert cut((inputs, targets), 8, "labels") == [(inputs, targets)]


@pytest.mark.slow
def test_through_the_cli_a_split_is_one_warning_line_and_raise_one_error_line(tmp_path):
    """As a user runs it: the plug-in on PYTHONPATH; the split run ends 0, the raised one in one line."""
    env = {"PYTHONPATH": str(PLUGINS)}
    common = (*TINY, *AT_8, "data.batch_size=16", "trainer.max_steps=2")
    split = run_cli("train", *common, f"hydra.run.dir={tmp_path / 'split'}", cwd=tmp_path, env=env)
    assert split.returncode == 0, split.stderr
    assert "out of memory at micro-batch 16: continuing with 8 x 2 per step" in split.stdout
    raised = run_cli(
        "train", *common, "on_oom=raise", f"hydra.run.dir={tmp_path / 'raised'}", cwd=tmp_path, env=env
    )
    errors = [line for line in (raised.stdout + raised.stderr).splitlines() if "error" in line]
    assert raised.returncode != 0 and len(errors) == 1 and "Traceback" not in raised.stderr, raised.stderr
    assert errors[0].startswith(
        "runner: error: out of memory at micro-batch 16, optimizer step 1 (on_oom=raise)"
    )
    assert last(tmp_path / "raised")["global_step"] == 0


@pytest.mark.parametrize("processes", [1, 2])
def test_several_processes_or_a_carried_state_stop_instead_of_splitting(processes):
    """Several processes: the others wait in the step's collectives (none can save). A model that carries
    a state from batch to batch: its state is per batch."""
    model = torch.nn.Linear(2, 2)
    if processes == 1:
        model.carried_state = type(
            "Carried", (), {"state_dict": dict, "load_state_dict": print, "reset": print}
        )()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    cpu = torch.device("cpu")
    learner = Learner(model, torch.nn.MSELoss(), optimizer, resolve_precision("fp32", cpu), cpu, False,
                      "labels", processes=processes)  # fmt: skip

    def runs_out(parts):
        raise torch.OutOfMemoryError("simulated")

    window = [(torch.zeros(4, 2), torch.zeros(4, 2))]
    expected = OutOfMemoryStop if processes == 1 else OutOfMemoryUnsaved
    with pytest.raises(expected) as stopped:
        step_within_memory(learner, window, TrainState(step=3), "split", lambda *_: None, runs_out)
    reason = "several processes" if processes == 2 else "a model that carries a state from batch to batch"
    assert str(stopped.value).startswith(f"out of memory at micro-batch 4, optimizer step 4: with {reason}")
    assert ("last.pt" in str(stopped.value)) == (processes == 1)


class RunsOutInItsUpdate(torch.optim.SGD):
    def step(self, closure=None):
        raise torch.OutOfMemoryError("simulated: the optimizer's state does not fit")


def test_out_of_memory_in_the_optimizers_update_is_not_redone_nor_saved():
    """The update may have changed some weights already: redoing the window would apply it twice."""
    model = torch.nn.Linear(2, 2)
    cpu = torch.device("cpu")
    learner = Learner(model, torch.nn.MSELoss(), RunsOutInItsUpdate(model.parameters(), lr=0.1),
                      resolve_precision("fp32", cpu), cpu, False, "labels")  # fmt: skip
    window = [(torch.zeros(4, 2), torch.zeros(4, 2))]
    with pytest.raises(OutOfMemoryUnsaved) as stopped:
        step_within_memory(learner, window, TrainState(), "split", lambda *_: None,
                           lambda parts: train_step(learner, parts, clip_norm=None))  # fmt: skip
    assert str(stopped.value).startswith("out of memory in the optimizer's update at optimizer step 1")
    assert all(parameter.grad is None for parameter in model.parameters())  # freed


def test_out_of_memory_in_a_step_the_model_writes_is_not_redone_nor_saved():
    """A model's own training_step may have applied one optimizer's update before the error (a GAN's
    discriminator, then its generator): the window cannot be redone, and the state is not saved."""
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    cpu = torch.device("cpu")
    learner = Learner(model, torch.nn.MSELoss(), optimizer, resolve_precision("fp32", cpu), cpu, False,
                      "labels", step=MODELS_STEP)  # fmt: skip

    def runs_out(parts):
        raise torch.OutOfMemoryError("simulated")

    window = [(torch.zeros(4, 2), torch.zeros(4, 2))]
    with pytest.raises(
        OutOfMemoryUnsaved, match="out of memory in a step the model writes at optimizer step 4"
    ):
        step_within_memory(learner, window, TrainState(step=3), "split", lambda *_: None, runs_out)


TORCHRUN = (sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m")
# A BatchNorm in front: buffers every process must hold alike, and that a forward which ran out of
# memory has updated already.
ON_TWO = (*TINY, *RUNS_OUT, "+model.norm=true", "+model.rank=1", "trainer.max_steps=4")


def torchrun(*arguments: str, cwd) -> subprocess.CompletedProcess:
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(PLUGINS)}
    command = [*TORCHRUN, "runner", "train", *arguments]
    return subprocess.run(command, cwd=cwd, env=environment, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_with_two_processes_where_one_runs_out_both_split_and_end_as_configured_2_x_8_x_2(tmp_path):
    """Rank 1 alone runs out at 16 samples: it tells rank 0 and both go on at 8 x 2, the run ending
    bit-identical (weights, BatchNorm statistics, optimizer, logged losses) to one configured 8 x 2 on 2
    processes, in DDP. Where even one sample runs out, both stop at the same point, in one line, and save."""
    split = torchrun(*ON_TWO, "on_oom=split", "data.batch_size=16", "+model.limit=8",
                     f"hydra.run.dir={tmp_path / 'split'}", cwd=tmp_path)  # fmt: skip
    assert split.returncode == 0, split.stderr[-3000:]
    said = "out of memory at micro-batch 16 on rank 1: continuing with 8 x 2 per step"
    assert (split.stdout + split.stderr).count(said) == 1  # one line for the run, not one per process
    # on_oom=raise: in DDP, whose averaging runner's own (with split) must equal bit for bit.
    configured = torchrun(*ON_TWO, "data.batch_size=8", "accumulate=2", "on_oom=raise",
                          f"hydra.run.dir={tmp_path / 'conf'}", cwd=tmp_path)  # fmt: skip
    assert configured.returncode == 0, configured.stderr[-3000:]
    ran_out, as_configured = last(tmp_path / "split"), last(tmp_path / "conf")
    assert ran_out["micro_batch_size"] == 8 and ran_out["global_step"] == 4
    assert "norm.1.running_mean" in ran_out["model_state_dict"]
    assert same_weights(ran_out["model_state_dict"], as_configured["model_state_dict"])
    for index, moments in as_configured["optimizer_state_dict"]["state"].items():
        assert same_weights(ran_out["optimizer_state_dict"]["state"][index], moments)
    split_scalars, configured_scalars = read_scalars(tmp_path / "split"), read_scalars(tmp_path / "conf")
    assert split_scalars["train/loss"] == configured_scalars["train/loss"]
    assert split_scalars[TAG] == [(1, 8.0)]

    no_norm = [argument for argument in ON_TWO if argument != "+model.norm=true"]  # (it needs 2 samples)
    stopped = torchrun(*no_norm, "on_oom=split", "data.batch_size=16", "+model.limit=0",
                       "+model.when=training", f"hydra.run.dir={tmp_path / 'stopped'}",
                       cwd=tmp_path)  # fmt: skip
    assert stopped.returncode != 0
    errors = [line for line in stopped.stderr.splitlines() if line.startswith("runner: error:")]
    assert errors and set(errors) == {errors[0]}, stopped.stderr[-3000:]  # each process, the same line
    assert errors[0].startswith("runner: error: out of memory at micro-batch 1, optimizer step 1: even one")
    assert "OutOfMemoryError" not in stopped.stderr  # no runner traceback (torchrun prints its own report)
    assert last(tmp_path / "stopped")["global_step"] == 0  # saved, by both processes together


@pytest.mark.slow
def test_with_two_processes_validation_splits_alike_where_one_runs_out(tmp_path):
    """Rank 1 runs out in validation alone (and in the first-batch check): both validate again at 8, and
    train on at that size."""
    run_dir = tmp_path / "run"
    validated = torchrun(*ON_TWO, "on_oom=split", "+model.when=evaluation", "+model.limit=8",
                         "data.batch_size=16", "trainer.max_steps=2", f"hydra.run.dir={run_dir}",
                         cwd=tmp_path)  # fmt: skip
    assert validated.returncode == 0, validated.stderr[-3000:]
    said = "out of memory in validation at batch 16 on rank 1: continuing with 8"
    assert (validated.stdout + validated.stderr).count(said) == 1
    assert last(run_dir)["micro_batch_size"] == 8 and read_scalars(run_dir)["val/loss"]


def test_the_processes_agree_on_memory_under_ddp_only_where_no_collective_runs_in_the_forward():
    """Under FSDP (its gathers) or with a SyncBatchNorm (its statistics) a process that runs out inside
    the forward cannot leave the others: those runs stop as with on_oom=raise instead of splitting."""
    two = ProcessInfo(rank=1, world_size=2)
    plain = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
    synced = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.SyncBatchNorm(4))
    assert memory_agreement(composed("on_oom=split"), two, plain) == Agreement(rank=1, enabled=True)
    assert not memory_agreement(composed("on_oom=split"), ProcessInfo(), plain).enabled  # no one to tell
    assert not memory_agreement(composed("on_oom=raise"), two, plain).enabled
    assert not memory_agreement(composed("on_oom=split", "strategy=fsdp"), two, plain).enabled
    assert not memory_agreement(composed("on_oom=split"), two, synced).enabled


def test_the_default_survives_out_of_memory_in_one_process_and_keeps_ddps_overlap_with_several():
    """on_oom=auto: split where it costs nothing per step; with several processes DDP's reducer (no
    agreement, which would need runner's own averaging after the backward); a name given is kept."""
    one, two = ProcessInfo(), ProcessInfo(rank=0, world_size=2)
    assert composed().on_oom == "auto"
    assert oom_policy(composed(), one) == "split"
    assert oom_policy(composed(), two) == "raise"
    assert not memory_agreement(composed(), two, torch.nn.Linear(2, 2)).enabled
    assert oom_policy(composed("on_oom=split"), two) == "split"
    assert oom_policy(composed("on_oom=raise"), one) == "raise"


@pytest.mark.slow
def test_processes_whose_batches_differ_in_size_halve_the_same_size(tmp_path):
    """Rank 1 runs out on a batch of 10 while rank 0 holds 16: both go on at 8 (rank 1 alone would take
    5, and the next windows would be cut into other numbers of micro-batches: a collective mismatch)."""
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [*TORCHRUN[:-1], str(PLUGINS / "uneven_split.py")]
    # As long as torchrun() gives a run: on 2 loaded cores this one took up to 90 s (120 s was too close).
    ran = subprocess.run(command, cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]
    for rank in (0, 1):
        said = (tmp_path / f"rank{rank}.txt").read_text().splitlines()
        assert said == ["step 1 micro-batch None", "step 2 micro-batch 8", "step 3 micro-batch 8"]


class NormedWithExtraState(torch.nn.Module):
    """Running statistics that a forward changes, a constant table it does not, and extra state that is
    not a tensor (``get_extra_state``). It runs out of memory once, after its BatchNorm, above 2 samples."""

    def __init__(self):
        super().__init__()
        self.norm, self.linear = torch.nn.BatchNorm1d(2), torch.nn.Linear(2, 2)
        self.register_buffer("table", torch.arange(4.0))
        self.runs_out = True

    def forward(self, inputs):
        normed = self.norm(inputs)
        if self.runs_out and len(inputs) > 2:
            self.runs_out = False
            raise torch.OutOfMemoryError("simulated, after the running statistics were updated")
        return self.linear(normed) + self.table[0]

    def get_extra_state(self):
        return {"version": 2}

    def set_extra_state(self, state):
        pass


def test_a_redone_window_starts_from_the_buffers_it_began_with_and_only_changing_ones_are_copied():
    """The first attempt's forward updates the running statistics before it runs out: the redone window
    starts from the statistics of before it, and ends as the window configured 2 x 2. From then on only
    the buffers a window changes are copied (not the constant table; extra state that is not a tensor is
    left alone)."""
    cpu = torch.device("cpu")

    def learner_of(model):
        return Learner(model, torch.nn.MSELoss(), torch.optim.SGD(model.parameters(), lr=0.1),
                       resolve_precision("fp32", cpu), cpu, False, "labels")  # fmt: skip

    split = NormedWithExtraState()
    configured = NormedWithExtraState()
    configured.load_state_dict(split.state_dict())
    configured.runs_out = False
    window = [(torch.randn(4, 2) + 3.0, torch.zeros(4, 2))]
    learner = learner_of(split)
    step_within_memory(learner, window, TrainState(), "split", lambda *_: None,
                       lambda parts: train_step(learner, parts, clip_norm=None))  # fmt: skip
    train_step(learner_of(configured), cut(window[0], 2, "labels"), clip_norm=None)
    saved = [model.state_dict() for model in (split, configured)]
    assert same_weights(*({k: v for k, v in kept.items() if k != "_extra_state"} for kept in saved))
    assert [id(buffer) for buffer in learner.changing_buffers] == [
        id(split.norm.running_mean), id(split.norm.running_var), id(split.norm.num_batches_tracked)
    ]  # fmt: skip


class DrawsFromNumpy(torch.nn.Linear):
    def forward(self, inputs):
        return super().forward(inputs) * float(1 + 0 * np.random.rand())


@pytest.mark.parametrize("model_class", [torch.nn.Linear, DrawsFromNumpy])
def test_python_and_numpy_states_are_copied_before_each_window_only_where_the_first_window_drew(model_class):
    """Copying Python's and numpy's states costs more than a small model's step: after a first window
    that drew from neither, only torch's generators are kept (a redo of a model that draws still
    restores them all, as the dropout test above shows)."""
    cpu, model = torch.device("cpu"), model_class(2, 2)
    learner = Learner(model, torch.nn.MSELoss(), torch.optim.SGD(model.parameters(), lr=0.1),
                      resolve_precision("fp32", cpu), cpu, False, "labels")  # fmt: skip
    window = [(torch.zeros(4, 2), torch.zeros(4, 2))]
    for _ in range(2):
        step_within_memory(learner, window, TrainState(), "split", lambda *_: None,
                           lambda parts: train_step(learner, parts, None))  # fmt: skip
        assert learner.draws_host_random is (model_class is DrawsFromNumpy)  # a bool, never numpy's
