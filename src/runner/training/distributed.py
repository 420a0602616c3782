"""Several processes through torchrun or a submitit job's tasks: PyTorch's own process group and
DistributedDataParallel.

torchrun sets RANK, WORLD_SIZE and LOCAL_RANK (submitit's helper exports the same for a job's tasks);
without them everything here is the one-process identity, so the engine reads the same either way.
"""

import os
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as torch_dist

from runner.config.errors import UserError
from runner.config.schema import PEER_TIMEOUT_S


@dataclass(frozen=True)
class ProcessInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def from_environment() -> ProcessInfo:
    return ProcessInfo(
        rank=int(os.environ.get("RANK", 0)),
        world_size=int(os.environ.get("WORLD_SIZE", 1)),
        local_rank=int(os.environ.get("LOCAL_RANK", 0)),
    )


# The variable naming the job, for each of submitit's executors.
SUBMITIT_JOB_IDS = {"slurm": "SLURM_JOB_ID", "local": "SUBMITIT_LOCAL_JOB_ID"}


def in_submitit_job() -> bool:
    """A job submitit started: it exports SUBMITIT_EXECUTOR (``slurm`` or ``local``) and the job's id
    into the job's environment, and its job process sets SUBMITIT_FOLDER before it runs the job. A
    SUBMITIT_EXECUTOR left over in a shell is not a job (it would turn ``train`` into a resume)."""
    executor = os.environ.get("SUBMITIT_EXECUTOR", "")
    job_id = SUBMITIT_JOB_IDS.get(executor)
    return job_id is not None and bool(os.environ.get(job_id)) and bool(os.environ.get("SUBMITIT_FOLDER"))


def join_submitit_tasks() -> bool:
    """In a submitit job with several tasks (SLURM's tasks_per_node x nodes, or the local executor's),
    every task becomes a rank, as under torchrun: submitit exports RANK, WORLD_SIZE, LOCAL_RANK,
    MASTER_ADDR and MASTER_PORT from the job's environment. Returns whether a process group started."""
    if not in_submitit_job() or "RANK" in os.environ:  # not submitit, or torchrun started inside a job
        return False
    import submitit

    if submitit.JobEnvironment().num_tasks == 1:
        return False
    submitit.helpers.TorchDistributedEnvironment().export()
    start_process_group()
    return True


class PeersMissing(UserError):
    """The other processes of a distributed run did not join in time."""


def start_process_group(peer_timeout_s: float = PEER_TIMEOUT_S) -> None:
    """gloo for CPU tensors, and nccl for CUDA ones where there is CUDA. Every process first meets the
    others at ``MASTER_ADDR:MASTER_PORT`` (torch's ``env://`` rendezvous), waiting ``peer_timeout_s`` for
    them; the group's own operations keep torch's default timeout."""
    backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
    address, port = os.environ.get("MASTER_ADDR", ""), int(os.environ.get("MASTER_PORT", 0))

    def missing(reason: str) -> PeersMissing:
        size = os.environ.get("WORLD_SIZE")
        return PeersMissing(
            f"WORLD_SIZE={size}: the {size} processes did not all meet at {address}:{port} within "
            f"peer_timeout_s={peer_timeout_s:g} ({reason}); start every process (torchrun starts them "
            "all), or unset WORLD_SIZE, RANK and LOCAL_RANK to run one"
        )

    started = time.monotonic()
    # Started by hand (not torchrun, whose agent is already listening): a process other than rank 0
    # first waits for rank 0 to listen. torch's own client would print a C++ stack trace per attempt.
    by_hand = int(os.environ.get("RANK", 0)) != 0 and "TORCHELASTIC_RUN_ID" not in os.environ
    if by_hand and not listening(address, port, peer_timeout_s):
        raise missing("rank 0 is not listening there")
    left = max(1.0, peer_timeout_s - (time.monotonic() - started))
    try:
        store, rank, world_size = next(torch_dist.rendezvous("env://", timeout=timedelta(seconds=left)))
    except (RuntimeError, ValueError) as error:  # torch's DistError is a RuntimeError
        raise missing((str(error).strip().splitlines() or [type(error).__name__])[0][:200]) from None
    store.set_timeout(torch_dist.default_pg_timeout)
    # As init_process_group does with a store it made itself: its keys under a prefix of their own. A group
    # torchrun restarted (--max-restarts) meets in the same agent's store: the last start's keys (the dead
    # workers' addresses) are not its own.
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    store = torch_dist.PrefixStore("default_pg" if restart == "0" else f"default_pg/restart_{restart}", store)
    torch_dist.init_process_group(backend=backend, store=store, rank=rank, world_size=world_size)


def listening(address: str, port: int, timeout_s: float) -> bool:
    """Whether something accepts connections at ``address:port`` within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((address, port), timeout=1.0):
                return True
        except OSError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.2)


@contextmanager
def process_group_of_one() -> Iterator[None]:
    """A process group of this process alone (``strategy=fsdp`` without torchrun), for as long as the
    run lasts; under torchrun (or submitit tasks) the group is already there and stays."""
    if torch_dist.is_initialized():
        yield
        return
    backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
    torch_dist.init_process_group(backend=backend, store=torch_dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        torch_dist.destroy_process_group()


def stop_process_group() -> None:
    if torch_dist.is_initialized():
        torch_dist.destroy_process_group()


def shared_run_dir(given: str | None, parent: str = "outputs") -> str:
    """Rank 0's run (or sweep) directory for every rank: Hydra's own timestamps differ between ranks
    that start in different seconds. Without a process group (torchrun with one process) this process's
    own, named the same way."""
    stamp = Path(parent, time.strftime("%Y-%m-%d"), time.strftime("%H-%M-%S"))
    proposal = [given or str(stamp.resolve())]
    grouped = torch_dist.is_initialized()
    if given is None and (not grouped or torch_dist.get_rank() == 0):
        proposal[0] += "-" + os.urandom(2).hex()
    if grouped:
        torch_dist.broadcast_object_list(proposal, src=0)
    return proposal[0]


def sum_across_processes(tensor: torch.Tensor) -> torch.Tensor:
    """In place; the identity with one process."""
    if torch_dist.is_initialized():
        torch_dist.all_reduce(tensor, op=torch_dist.ReduceOp.SUM)
    return tensor


def broadcast_from_first(tensors: list[torch.Tensor]) -> None:
    """Rank 0's values in every process's ``tensors``, in place: one broadcast per dtype and device,
    as DDP hands buffers over (a model's many small BatchNorm statistics are one message)."""
    if not torch_dist.is_initialized() or not tensors:
        return
    kinds: dict[tuple[torch.dtype, torch.device], list[torch.Tensor]] = {}
    for tensor in tensors:
        kinds.setdefault((tensor.dtype, tensor.device), []).append(tensor.detach())
    for same_kind in kinds.values():
        flat = torch.cat([tensor.reshape(-1) for tensor in same_kind])
        torch_dist.broadcast(flat, src=0)
        for tensor, values in zip(same_kind, flat.split([t.numel() for t in same_kind]), strict=True):
            tensor.copy_(values.view_as(tensor))


def average_gradients(
    parameters: list[torch.Tensor], processes: int, before_reducing: Callable[[], None] = lambda: None
) -> None:
    """Each parameter's gradient averaged over every process as DDP averages it: times 1/processes, then
    summed, in one collective per dtype and device (DDP's buckets keep them apart too), and copied back
    into the gradient (its memory layout kept). One that no process has stays None: a flag per
    parameter rides along. ``before_reducing`` runs once the buffers are built, before any collective:
    building them may run out of memory (``memory_agreement.py``)."""
    kinds: dict[tuple[torch.dtype, torch.device], list[torch.Tensor]] = {}
    for parameter in parameters:
        kinds.setdefault((parameter.dtype, parameter.device), []).append(parameter)
    flats = []
    for same_kind in kinds.values():
        pieces = [(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in same_kind]
        had = [p.grad is not None for p in same_kind]
        flat = torch.cat([*pieces, torch.tensor(had, dtype=pieces[0].dtype, device=pieces[0].device)])
        flat[: -len(same_kind)].mul_(1.0 / processes)
        flats.append(flat)
    before_reducing()
    for same_kind, flat in zip(kinds.values(), flats, strict=True):
        sum_across_processes(flat)
        grads, flags = flat[: -len(same_kind)].split([p.numel() for p in same_kind]), flat[-len(same_kind) :]
        for parameter, grad, flag in zip(same_kind, grads, flags.tolist(), strict=True):  # one read per kind
            if flag > 0:
                if parameter.grad is None:
                    parameter.grad = torch.empty_like(parameter)
                parameter.grad.copy_(grad.view_as(parameter))


def any_process(value: int) -> int:
    """The largest of every process's ``value`` (0 where none is set): all ranks decide alike."""
    if not torch_dist.is_initialized():
        return value
    flag = torch.tensor([value], dtype=torch.int64)
    torch_dist.all_reduce(flag, op=torch_dist.ReduceOp.MAX)
    return int(flag.item())
