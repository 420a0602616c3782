"""No host sync on a quiet step: on a step that neither logs, validates nor checkpoints, runner's own code
reads no tensor's value (on a GPU each read makes the host wait for the device). Every read of a
tensor's value is the operator ``aten._local_scalar_dense`` (``.item()``, ``bool()``, ``float()``); a
``TorchDispatchMode`` (torch's documented way to see every operator, "Extending PyTorch") sees each, and
its innermost caller says whose read it is. Torch's own reads (Adam's CPU step counter)
are not runner's."""

import sys
from pathlib import Path

import pytest
import torch
from conftest import read_scalars
from torch.utils._python_dispatch import TorchDispatchMode

import runner
from runner.training.nonfinite import NonFiniteError

RUNNER_CODE = str(Path(runner.__file__).parent)
TORCH = Path(torch.__file__).parent
# The frames between a read and the mode: the mode's own entry (torch wraps it so that compile skips it).
ENTRY = (str(TORCH / "_dynamo"), str(TORCH / "_compile.py"), str(TORCH / "utils" / "_python_dispatch.py"))
IN_A_STEP = {"train_step", "step_within_memory"}
# The default path on a tiny model: logging every 5 steps, no validation or checkpoint before the end.
QUIET = ("data=regression", "data.dataset.num_features=8", "data.dataset.num_train=256",
         "model.hidden=[16]", "data.batch_size=16", "trainer.max_steps=20", "trainer.max_epochs=null",
         "trainer.log_every_n_steps=5", "trainer.val_every_n_epochs=null", "checkpoint=none")  # fmt: skip


class RunnersReads(TorchDispatchMode):
    """Each read whose innermost caller is runner's: (function, in a step?, the loop's step)."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[tuple[str, bool, int | None]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default:
            frame = sys._getframe(1)
            while frame is not None and frame.f_code.co_filename.startswith(ENTRY):
                frame = frame.f_back
            if frame is not None and frame.f_code.co_filename.startswith(RUNNER_CODE):
                self.reads.append((frame.f_code.co_qualname, *where(frame)))
        return func(*args, **(kwargs or {}))


def where(frame) -> tuple[bool, int | None]:
    """Whether the read is inside a training step, and the loop's step count (``fit``'s state) then."""
    in_step, step = False, None
    while frame is not None:
        in_step = in_step or frame.f_code.co_name in IN_A_STEP
        if frame.f_code.co_name == "fit" and "state" in frame.f_locals:
            step = frame.f_locals["state"].step
        frame = frame.f_back
    return in_step, step


@pytest.mark.parametrize("on_nonfinite", ["raise", "off"])
def test_a_quiet_step_reads_no_tensor_and_a_log_step_reads_only_its_values(train_here, on_nonfinite):
    """The default ``on_nonfinite=raise`` reads its norms with the log step's values (nonfinite.py)."""
    with RunnersReads() as mode:
        run_dir = train_here(*QUIET, f"on_nonfinite={on_nonfinite}")
    during_training = [read for read in mode.reads if read[2] is not None]
    assert [read for read in during_training if read[1]] == []  # no read inside any step
    assert {step for _, _, step in during_training} == {5, 10, 15, 20}  # the log steps (the last validates)
    quiet = [read for read in during_training if read[2] % 5]
    assert quiet == []
    assert [step for step, _ in read_scalars(run_dir)["train/loss"]] == [5, 10, 15, 20]


def test_the_counter_sees_a_read_in_every_step_where_the_guard_must_decide_each_step(train_here):
    """``on_nonfinite=skip`` decides each step's update: one read of its norm per step, which the
    counter sees (so the test above fails the day a read is added to a step)."""
    with RunnersReads() as mode:
        train_here(*QUIET, "on_nonfinite=skip")
    in_steps = [read for read in mode.reads if read[1] and read[2] is not None]
    assert len(in_steps) == 20 and {function for function, _, _ in in_steps} == {"update"}


def test_a_nonfinite_norm_between_log_steps_stops_at_the_next_read_naming_its_step(train_here, tmp_path):
    """The step a skip run skips is the one the deferred guard names; nothing after it is logged as a
    loss or saved (``last.pt`` is not written, no periodic checkpoint holds it)."""
    nan = ("data.dataset._target_=broken.one_nan_sample", "data.dataset.num_train=64", "data.batch_size=16",
           "data=regression", "trainer.max_epochs=2", "optimizer.lr=0.01")  # fmt: skip
    skipped = train_here(*nan, "on_nonfinite=skip", "trainer.log_every_n_steps=1", run_dir=tmp_path / "skip")
    first_skip = next(step for step, count in read_scalars(skipped)["train/skipped_steps"] if count == 1)
    with pytest.raises(NonFiniteError) as error:
        cadence = ("trainer.log_every_n_steps=4", "checkpoint.every_n_steps=2")
        train_here(*nan, *cadence, run_dir=tmp_path / "raise")
    message = str(error.value)
    assert message.startswith(f"non-finite gradient (total norm nan) at optimizer step {first_skip} ")
    stopped = int(message.split("the run stopped at step ")[1].split(",")[0])
    assert first_skip <= stopped <= first_skip + 1  # the next read: a save (every 2 steps) or a log step
    checkpoints = {path.name for path in (tmp_path / "raise" / "checkpoints").iterdir()}
    assert "last.pt" not in checkpoints
    assert all(int(name[5:13]) < first_skip for name in checkpoints if name.startswith("step_"))
