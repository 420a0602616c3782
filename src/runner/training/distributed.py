"""Several processes through torchrun or a submitit job's tasks: PyTorch's own process group and
DistributedDataParallel.

torchrun sets RANK, WORLD_SIZE and LOCAL_RANK (submitit's helper exports the same for a job's tasks);
without them everything here is the one-process identity, so the engine reads the same either way.
"""

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as torch_dist


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


def in_submitit_job() -> bool:
    """submitit exports SUBMITIT_EXECUTOR (``slurm`` or ``local``) into every job it starts."""
    return bool(os.environ.get("SUBMITIT_EXECUTOR"))


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


def start_process_group() -> None:
    """gloo for CPU tensors, and nccl for CUDA ones where there is CUDA."""
    backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
    torch_dist.init_process_group(backend=backend)


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
    that start in different seconds."""
    stamp = Path(parent, time.strftime("%Y-%m-%d"), time.strftime("%H-%M-%S"))
    proposal = [given or str(stamp.resolve())]
    if torch_dist.get_rank() == 0 and given is None:
        proposal[0] += "-" + os.urandom(2).hex()
    torch_dist.broadcast_object_list(proposal, src=0)
    return proposal[0]


def sum_across_processes(tensor: torch.Tensor) -> torch.Tensor:
    """In place; the identity with one process."""
    if torch_dist.is_initialized():
        torch_dist.all_reduce(tensor, op=torch_dist.ReduceOp.SUM)
    return tensor


def any_process(value: int) -> int:
    """The largest of every process's ``value`` (0 where none is set): all ranks decide alike."""
    if not torch_dist.is_initialized():
        return value
    flag = torch.tensor([value], dtype=torch.int64)
    torch_dist.all_reduce(flag, op=torch_dist.ReduceOp.MAX)
    return int(flag.item())
