"""Sharded checkpoints (``strategy=fsdp``): one folder per checkpoint, written by every process through
``torch.distributed.checkpoint`` (DCP), read back on any number of processes, or by one (``consolidate``).

A folder holds each process's shards (``__<rank>_0.distcp``), DCP's index of them (``.metadata``) and
``runner.pt``: everything else a resume needs (train state, random states, scheduler, config), a plain
checkpoint whose sharded tensors are placeholders, plus a checksum of every shard file and of the
index. It is written
into ``.<name>.tmp`` and renamed to ``<name>`` only once all of that is written: a folder under its own
name is complete, and a save killed half-way leaves the previous checkpoint the newest valid one.

Nothing read from disk runs code: ``runner.pt`` is loaded with ``weights_only=True``, and a folder is
checked (``sharded_checks.py``) before DCP reads it.
"""

import os
import shutil
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
import torch.distributed as torch_dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import CheckpointException
from torch.distributed.tensor import DTensor, Shard

from runner.checkpoint.durable import fsync_folder
from runner.checkpoint.files import RECORD, CheckpointError, atomic_save
from runner.checkpoint.sharded_checks import (
    FILE_CHECKSUMS,
    PLACEHOLDER,
    check_folder,
    checksummed_files,
    dtype_named,
    file_checksum,
    placeholders,
)


def split_sharded(payload: Any, path: tuple[str, ...] = ()) -> tuple[Any, dict[str, DTensor]]:
    """``payload`` with every DTensor replaced by a placeholder, and the DTensors by key (their path in
    the payload): the placeholders go into ``runner.pt``, the shards through DCP."""
    if isinstance(payload, DTensor):
        if tuple(payload.placements) != (Shard(0),):
            where = ".".join(path)
            raise CheckpointError(f"cannot save {where}: sharded as {payload.placements}, not as Shard(0)")
        key = "/".join(path)
        return {PLACEHOLDER: key, "shape": list(payload.shape), "dtype": str(payload.dtype)}, {key: payload}
    if isinstance(payload, Mapping):
        plain, tensors = {}, {}
        for name, value in payload.items():
            plain[name], found = split_sharded(value, (*path, str(name)))
            tensors.update(found)
        return plain, tensors
    if type(payload) in (list, tuple):
        parts = [split_sharded(value, (*path, str(index))) for index, value in enumerate(payload)]
        tensors = {key: tensor for _, found in parts for key, tensor in found.items()}
        return type(payload)(plain for plain, _ in parts), tensors
    return payload, {}


def fill(record: Any, tensors: Mapping[str, torch.Tensor]) -> Any:
    """``record`` with each placeholder replaced by its loaded tensor."""
    if isinstance(record, Mapping):
        if PLACEHOLDER in record:
            return tensors[record[PLACEHOLDER]]
        return {name: fill(value, tensors) for name, value in record.items()}
    if type(record) in (list, tuple):
        return type(record)(fill(value, tensors) for value in record)
    return record


def read_shards(folder: Path, record: Mapping[str, Any], target: Callable[[dict], torch.Tensor]) -> Any:
    """The record (of a folder :func:`check_folder` passed) with its placeholders filled:
    ``target`` makes the empty tensor each one is read into (a DTensor on this run's processes, or a
    whole tensor for one process). DCP re-shards as needed."""
    tensors = {entry[PLACEHOLDER]: target(entry) for entry in placeholders(record)}
    try:
        with warnings.catch_warnings():  # one process reads alone on purpose (consolidate, eval)
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
            dcp.load(tensors, checkpoint_id=folder, no_dist=not torch_dist.is_initialized())
    except (Exception, CheckpointException) as error:  # DCP's gathers every rank's error (a BaseException)
        first = str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__
        raise CheckpointError(f"checkpoint {folder} cannot be read ({first[:300]})") from None
    return fill(record, tensors)


def load_sharded(folder: Path, record: Mapping[str, Any], model: torch.nn.Module) -> Any:
    """For a resume (``locate`` checked the folder when it found it): the shards re-sharded over this
    run's processes, as the model's own parameters are."""
    mesh = next(p.device_mesh for p in model.parameters() if isinstance(p, DTensor))

    def target(entry: dict) -> torch.Tensor:
        shape, dtype = entry["shape"], dtype_named(entry["dtype"], folder)
        return torch.distributed.tensor.empty(shape, dtype=dtype, device_mesh=mesh, placements=[Shard(0)])

    return read_shards(folder, record, target)


def consolidated(folder: Path, record: Mapping[str, Any]) -> Any:
    """For one process: every tensor whole, on the CPU (a plain checkpoint's contents)."""
    check_folder(folder, record)
    return read_shards(
        folder, record, lambda entry: torch.empty(entry["shape"], dtype=dtype_named(entry["dtype"], folder))
    )


def write_shards(tensors: dict[str, DTensor], folder: Path, background: bool, group: Any = None) -> Any:
    """Every process writes its shards into ``folder``; rank 0 writes DCP's index last. In the
    background the shards are copied first, and a future is returned."""
    folder.mkdir(parents=True, exist_ok=True)
    if background:
        return dcp.async_save(tensors, checkpoint_id=folder, process_group=group)
    dcp.save(tensors, checkpoint_id=folder)
    return None


def commit(record: dict[str, Any], temporary: Path, final: Path) -> None:
    """Rank 0, once every shard and the index are written: ``runner.pt`` (with the shards' checksums),
    then the rename that makes the folder a checkpoint. An older folder of the name is replaced."""
    checksums = {path.name: file_checksum(path) for path in checksummed_files(temporary)}
    record = {**record, FILE_CHECKSUMS: checksums}
    atomic_save(record, temporary / RECORD)
    replace_folder(temporary, final)


def replace_folder(new: Path, final: Path) -> None:
    """``final`` becomes ``new``. An older ``final`` is moved aside first (``.<name>.old``) and removed
    after: a crash in between leaves it there, and :func:`clean_folder` puts it back."""
    old = final.with_name(f".{final.name}.old")
    if final.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final, old)
    os.replace(new, final)
    fsync_folder(final.parent)
    shutil.rmtree(old, ignore_errors=True)


def link_folder(source: Path, temporary: Path, final: Path) -> None:
    """A second name for a checkpoint of the same moment (``best`` and ``step_<N>``): hard links, no
    second write. Removing one name keeps the other's files."""
    shutil.rmtree(temporary, ignore_errors=True)
    temporary.mkdir()
    for path in source.iterdir():
        os.link(path, temporary / path.name)
    replace_folder(temporary, final)


def clean_folder(folder: Path) -> list[str]:
    """At the start of a run that writes sharded checkpoints here (rank 0, before any save): a folder a
    crash left moved aside comes back, half-written ones are removed. Returns what was removed."""
    removed = []
    for path in sorted(folder.iterdir()):
        if not (path.is_dir() and path.name.startswith(".")):
            continue
        name = path.name[1:].rsplit(".", 1)[0]
        if path.name.endswith(".old") and not (folder / name).exists():
            os.replace(path, folder / name)
            continue
        if path.name.endswith((".old", ".tmp")):
            shutil.rmtree(path)
            removed.append(path.name)
    return removed
