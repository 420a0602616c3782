"""No host sync on a quiet step, none per validation batch: on a step that neither logs, validates nor
checkpoints, runner's own code reads no tensor's value and makes no blocking copy (on a GPU each makes
the host wait for the device), in every configuration of the matrix below; a log step reads once, a
validation pass once, at its end.

The probe is a ``TorchFunctionMode`` with a ``TorchDispatchMode`` inside it (torch's documented ways to
see calls, "Extending PyTorch"). It counts the calls that would block on a GPU: reads (``item``,
``tolist``, ``numpy``, ``cpu``, ``bool``/``float``/``int`` of a tensor, ``torch.equal``, ``nonzero``, a
boolean mask as an index, and the operator ``aten._local_scalar_dense`` behind them all) and copies (a
tensor made on a device from Python data, a ``.to(device)`` that is not ``non_blocking``). Each is
runner's when its innermost caller outside torch is runner's code; the calls one function call makes
are one read (on a GPU ``to_floats`` reads a log step's values in one copy, on the CPU with ``item``).

What it cannot see, on the CPU where it runs: the device a tensor would be on. It therefore counts
every ``.to(device)`` that blocks, and every read, as if the tensor were on a GPU, except in
``device.host_number``, runner's one read of host memory (a count of a batch the data loader made,
before it goes to the device), whose device branch (a count on the device stays there) is shown on the
``meta`` device below, where a read raises; and in ``runner/data``, whose epoch order is drawn by a
generator on the host, for the data loader on the host. Torch's own reads (Adam's CPU step count, the loss
scaler's) are not runner's."""

import sys
from pathlib import Path

import pytest
import torch
from conftest import REPO, read_scalars
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

import runner
from runner.training.batches import ModelLoss, loss_items
from runner.training.item_counts import checked_count
from runner.training.nonfinite import NonFiniteError

RUNNER_CODE = str(Path(runner.__file__).parent)
DATA_ORDER = str(Path(runner.__file__).parent / "data")  # an epoch's order: drawn on the host, for the host
TORCH = Path(torch.__file__).parent
# The frames between a call and the probe: its own, and the modes' entry (torch wraps it so that compile
# skips it). Any other of torch's frames is torch's code calling: torch's read, not runner's.
ENTRY = (__file__, str(TORCH / "_dynamo"), str(TORCH / "_compile.py"),
         str(TORCH / "utils" / "_python_dispatch.py"), str(TORCH / "overrides.py"))  # fmt: skip
HOST_READ = "host_number"
IN_A_STEP = {"train_step", "step_within_memory", "manual_train_step"}
Tensor = torch.Tensor
READS = {Tensor.item, Tensor.tolist, Tensor.numpy, Tensor.cpu, Tensor.__bool__, Tensor.__float__,
         Tensor.__int__, Tensor.__index__, torch.equal, Tensor.equal, torch.nonzero, Tensor.nonzero,
         torch.argwhere, torch.masked_select, Tensor.masked_select, torch.is_nonzero}  # fmt: skip
FROM_PYTHON = {torch.tensor, torch.as_tensor, torch.scalar_tensor}
MOVES = {Tensor.to, Tensor.cuda}


def blocks(func, args, kwargs) -> bool:
    """Whether the call would make the host wait for a GPU (or copy through pageable memory)."""
    if func in READS:
        return True
    if func in FROM_PYTHON:  # a tensor made on a device from Python data: a blocking host-to-device copy
        device = kwargs.get("device")
        data = args[0] if args else None
        return device is not None and not (isinstance(data, Tensor) and data.device == torch.device(device))
    if func in MOVES:
        moves = any(isinstance(arg, str | torch.device | Tensor) for arg in args[1:]) or "device" in kwargs
        return moves and not kwargs.get("non_blocking", False)
    if func is Tensor.copy_:  # into a tensor on another device (one on the same device is no wait)
        return args[0].device != args[1].device and not kwargs.get("non_blocking", False)
    if func is Tensor.__getitem__:  # a boolean mask's result has a size only the data knows
        index = args[1] if isinstance(args[1], tuple) else (args[1],)
        return any(isinstance(part, Tensor) and part.dtype == torch.bool for part in index)
    return False


class Probe:
    """Runner's blocking calls: for each, (read point, function, in a step?, fit's step, validation pass)."""

    def __init__(self) -> None:
        self.points: list = []  # the frames, kept alive so that their ids stay theirs
        self.reads: list[tuple[int, str, bool, int | None, int | None]] = []

    def saw(self) -> None:
        frame = sys._getframe(2)
        while frame is not None and (frame.f_code.co_filename.startswith(ENTRY)
                                     or frame.f_code.co_name.startswith("<")):  # fmt: skip
            frame = frame.f_back
        if frame is None or not frame.f_code.co_filename.startswith(RUNNER_CODE):
            return
        if frame.f_code.co_filename.startswith(DATA_ORDER):
            return
        if frame.f_code.co_name == HOST_READ:
            return
        self.points.append(frame)
        self.reads.append((id(frame), frame.f_code.co_qualname, *where(frame)))


def where(frame) -> tuple[bool, int | None, int | None]:
    """Whether the call is inside a training step, the loop's step (``fit``'s state) then, and the
    validation pass it is in (its ``evaluate`` call)."""
    in_step, step, validation = False, None, None
    while frame is not None:
        in_step = in_step or frame.f_code.co_name in IN_A_STEP
        if frame.f_code.co_name == "evaluate" and frame.f_code.co_filename.endswith("validation.py"):
            validation = id(frame)
        if frame.f_code.co_name == "fit" and "state" in frame.f_locals:
            step = frame.f_locals["state"].step
        frame = frame.f_back
    return in_step, step, validation


class Calls(TorchFunctionMode):
    def __init__(self, probe: Probe) -> None:
        super().__init__()
        self.probe = probe

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if blocks(func, args, kwargs):
            self.probe.saw()
        return func(*args, **kwargs)


class Operators(TorchDispatchMode):
    """Every read of a value reaches this operator, whatever Python call made it."""

    def __init__(self, probe: Probe) -> None:
        super().__init__()
        self.probe = probe

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default:
            self.probe.saw()
        return func(*args, **(kwargs or {}))


def probed(train, *overrides: str, **where_to) -> tuple[Probe, Path]:
    probe = Probe()
    with Calls(probe), Operators(probe):
        run_dir = train(*overrides, **where_to)
    return probe, run_dir


# Logging every 3 steps, validating every 6, no checkpoint: steps 1, 2, 4, 5, 7, 8, 10, 11 are quiet.
CADENCE = ("trainer.max_steps=12", "trainer.max_epochs=null", "trainer.log_every_n_steps=3",
           "trainer.val_every_n_steps=6", "trainer.val_every_n_epochs=null", "checkpoint=none")  # fmt: skip
MSE = ("data=regression", "data.dataset.num_features=8", "data.dataset.num_train=256", "model.hidden=[16]",
       "data.batch_size=8")  # fmt: skip
# Cross-entropy ignores -100 by default: its items are the targets that are not, counted.
CROSS_ENTROPY = ("data=classification", "data.dataset.num_train=256", "data.dataset.num_val=64",
                 "model.hidden=[16]", "data.batch_size=8", "+loss.ignore_index=-100")  # fmt: skip
EXAMPLE = REPO / "examples" / "causal_lm"
LM = (f"hydra.searchpath=[file://{EXAMPLE / 'conf'}]", "+experiment=causal_lm", "callbacks=none",
      "model.width=16", "model.layers=1", "data.batch_size=2")  # fmt: skip
SAYS = (*LM, "model._target_=counted_lm.CountedCausalLM")
SAYS_A_NUMBER = (*LM, "model._target_=counted_lm.CountedAsNumber")
OWN_STEP = (*CROSS_ENTROPY, "model._target_=own_steps.OwnStep")

MATRIX = {"mse": MSE, "cross-entropy": CROSS_ENTROPY, "model-says-items": SAYS, "own-step": OWN_STEP}
# Every workload with accumulate 1 and 4 and either guard; a count said as a Python number once.
CASES = [
    *(
        (workload, accumulate, guard)
        for workload in MATRIX
        for accumulate in (1, 4)
        for guard in ("raise", "skip")
    ),
    ("model-says-a-number", 4, "raise"),
]


@pytest.mark.parametrize(
    ("workload", "accumulate", "on_nonfinite"),
    [pytest.param(*case, id="-".join(map(str, case))) for case in CASES],
)
def test_quiet_steps_and_validation_batches_wait_for_nothing(
    train_here, monkeypatch, workload, accumulate, on_nonfinite
):
    """0 reads or blocking copies on a quiet step and per validation batch; 1 per log step and per
    validation pass; none inside any step."""
    monkeypatch.syspath_prepend(str(EXAMPLE))
    settings = (
        *{**MATRIX, "model-says-a-number": SAYS_A_NUMBER}[workload],
        *CADENCE,
        f"accumulate={accumulate}",
        f"on_nonfinite={on_nonfinite}",
    )
    probe, run_dir = probed(train_here, *settings)
    during = [read for read in probe.reads if read[3] is not None and read[3] >= 1]
    assert [function for _, function, in_step, _, _ in during if in_step] == []
    assert {step for _, _, _, step, _ in during} <= {3, 6, 9, 12}  # only at log and validation steps
    passes = {validation for *_, validation in during if validation is not None}
    assert len(passes) == 2  # steps 6 and 12
    for validation in passes:  # its one read: the values at its end, whatever its batches
        reads = [(point, function) for point, function, *_, in_pass in during if in_pass == validation]
        assert len(set(reads)) == 1 and reads[0][1] == "to_floats", reads
    for step in (3, 6, 9, 12):
        reads = [
            (point, function) for point, function, _, at, in_pass in during if at == step and in_pass is None
        ]
        assert len(set(reads)) == 1 and reads[0][1] == "to_floats", (step, reads)
    assert [step for step, _ in read_scalars(run_dir)["train/loss"]] == [3, 6, 9, 12]


def test_the_probe_sees_reads_and_copies_it_must_count():
    """Each kind of call the test counts, counted once per call, as runner's; torch's own not."""
    probe = Probe()
    value = torch.ones(3)
    with Calls(probe), Operators(probe):
        exec_in_runner(
            "value.sum().item(); value.tolist(); value.cpu(); bool(value.sum()); torch.equal(value, value); "
            "value.nonzero(); value[value > 0]; torch.as_tensor(3, device=value.device); "
            "value.to('cpu'); value.to('cpu', non_blocking=True); value.sum() * 2; torch.full((), 3.0)",
            value,
        )
        torch.optim.Adam([torch.zeros(2, requires_grad=True)]).state_dict()  # torch's: not runner's
    assert len(probe.reads) >= 9 and len({point for point, *_ in probe.reads}) == 1


def exec_in_runner(source: str, value: torch.Tensor) -> None:
    """Run ``source`` as if it were a function of runner's code (its file is runner's)."""
    code = compile(
        f"def line(torch, value):\n    {source}\n", str(Path(RUNNER_CODE) / "probe_line.py"), "exec"
    )
    namespace: dict = {}
    exec(code, namespace)
    namespace["line"](torch, value)


def test_a_count_on_the_device_stays_there():
    """The device branch the CPU run cannot take: on the ``meta`` device (where a read raises) the
    counts of a batch and a count a model says come back as tensors, unread."""
    meta = torch.device("meta")
    targets = torch.zeros(4, 6, dtype=torch.long, device=meta)
    count = loss_items((torch.zeros(4, 3, 6, device=meta), targets), torch.nn.CrossEntropyLoss())
    assert isinstance(count, torch.Tensor) and count.device == meta
    said = loss_items({"input_ids": targets, "labels": targets}, ModelLoss())
    assert isinstance(said, torch.Tensor) and said.device == meta
    told = torch.zeros((), dtype=torch.long, device=meta)
    assert checked_count(told) is told


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


def test_a_skipped_step_is_counted_at_the_next_log_step_and_its_update_not_applied(train_here, tmp_path):
    """``on_nonfinite=skip`` decides on the device: the skipped step's weights are the step before's
    (the final ones finite), and the log step after it reports it in ``train/skipped_steps``."""
    nan = ("data.dataset._target_=broken.one_nan_sample", "data.dataset.num_train=64", "data.batch_size=16",
           "data=regression", "trainer.max_epochs=2", "optimizer.lr=0.01", "on_nonfinite=skip")  # fmt: skip
    every = train_here(*nan, "trainer.log_every_n_steps=1", run_dir=tmp_path / "every")
    rarely = train_here(*nan, "trainer.log_every_n_steps=3", run_dir=tmp_path / "rarely")
    counted = dict(read_scalars(every)["train/skipped_steps"])
    logged = read_scalars(rarely)["train/skipped_steps"]
    assert logged and all(count == counted[step] for step, count in logged)  # as of each log step
    final = [torch.load(run / "checkpoints" / "last.pt")["model_state_dict"] for run in (every, rarely)]
    for name, tensor in final[0].items():
        assert torch.isfinite(tensor).all() and torch.equal(final[1][name], tensor), name
