"""What is checked of a sharded checkpoint's folder before anything reads its shards (``sharded.py``
writes and reads them): plain files only; every shard file and DCP's index (``.metadata``) as the save
wrote them, by the checksums in ``runner.pt``; an index that names only tensors, exactly those
``runner.pt`` holds places for, each in a slice of one of the folder's own shard files. Each failure is
a ``CheckpointError``: a resume skips the folder for the previous checkpoint, as for a damaged file.

DCP reads ``.metadata`` with plain ``pickle.load``: it is first read here with an unpickler that builds
only DCP's own index classes, so it cannot name anything else to import or call, and DCP, told where
to read by it, opens no path outside the folder.
"""

import hashlib
import io
import math
import pickle
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint.metadata import (
    BytesStorageMetadata,
    Metadata,
    MetadataIndex,
    TensorStorageMetadata,
)

from runner.checkpoint.files import CheckpointError

METADATA = ".metadata"
PLACEHOLDER = "__sharded__"  # a DTensor's place in runner.pt: {"__sharded__": key, "shape", "dtype"}
FILE_CHECKSUMS = "shard_checksums"


def placeholders(record: Any) -> list[dict[str, Any]]:
    if isinstance(record, Mapping):
        if PLACEHOLDER in record:
            return [dict(record)]
        return [found for value in record.values() for found in placeholders(value)]
    if type(record) in (list, tuple):
        return [found for value in record for found in placeholders(value)]
    return []


def dtype_named(name: str, folder: Path) -> torch.dtype:
    dtype = getattr(torch, str(name).removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype):
        raise CheckpointError(f"checkpoint {folder} is damaged: runner.pt names no tensor type {name!r}")
    return dtype


# The classes DCP's index is made of (torch 2.13), and torch's dtypes: all the metadata unpickler builds.
METADATA_CLASSES = {
    ("torch.distributed.checkpoint.metadata", name)
    for name in (
        "Metadata",
        "MetadataIndex",
        "StorageMeta",
        "TensorProperties",
        "TensorStorageMetadata",
        "ChunkStorageMetadata",
        "_MEM_FORMAT_ENCODING",
    )
} | {
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("torch", "Size"),
    ("torch.serialization", "_get_layout"),  # a layout by its name
    ("pathlib", "PosixPath"),
    ("pathlib", "WindowsPath"),
    ("collections", "OrderedDict"),
}


class MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in METADATA_CLASSES or (
            module == "torch" and isinstance(getattr(torch, name, None), torch.dtype)
        ):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not part of a checkpoint index")


def read_index(folder: Path) -> Metadata:
    """DCP's index, read with :class:`MetadataUnpickler`. Whatever a damaged or forged pickle makes it
    raise (``MemoryError`` for a huge length, ``OverflowError``, a wrong class) is one error."""
    try:
        metadata = MetadataUnpickler(io.BytesIO((folder / METADATA).read_bytes())).load()
    except Exception as error:  # anything a forged pickle raises (MemoryError too) is a damaged index
        reason = f"{type(error).__name__}: {error}".splitlines()[0][:200]
        raise CheckpointError(
            f"checkpoint {folder} is corrupted: its index ({METADATA}) was refused or is damaged ({reason}); "
            "runner reads only tensor shards. Do not load it unless you trust where it came from."
        ) from None
    if not (
        isinstance(metadata, Metadata)
        and isinstance(metadata.state_dict_metadata, dict)
        and isinstance(metadata.storage_data, dict)
    ):
        raise CheckpointError(f"checkpoint {folder} is corrupted: its index ({METADATA}) is not DCP's index")
    return metadata


def index_damaged(folder: Path, what: str) -> CheckpointError:
    return CheckpointError(
        f"checkpoint {folder} is corrupted: its index ({METADATA}) {what}; use another checkpoint of the run"
    )


def check_metadata(folder: Path, record: Mapping[str, Any]) -> None:
    """DCP's index may describe only tensors (a byte item would be read with ``torch.load``
    unrestricted), exactly the tensors ``runner.pt`` holds places for, each read from a slice of one of
    the folder's own shard files: DCP opens no path outside the folder, and finds what it looks for."""
    metadata = read_index(folder)
    entries = metadata.state_dict_metadata
    if any(isinstance(entry, BytesStorageMetadata) for entry in entries.values()):
        raise CheckpointError(
            f"checkpoint {folder}: its index names pickled objects besides tensors; runner reads only "
            "tensor shards. Do not load it unless you trust where it came from."
        )
    sizes = {path.name: path.stat().st_size for path in shard_files(folder)}

    try:
        check_index(metadata, record, sizes, folder)
    except CheckpointError:  # a ValueError too
        raise
    except (AttributeError, TypeError, ValueError) as error:  # forged objects of the index's classes
        raise index_damaged(folder, f"is malformed ({type(error).__name__})") from None


def check_index(metadata: Metadata, record: Mapping[str, Any], sizes: dict[str, int], folder: Path) -> None:
    """Every place the index names is a slice of a shard file of the folder (``sizes``: their sizes),
    and every tensor of the record is described, whole, as the record says."""

    entries = metadata.state_dict_metadata
    for where in metadata.storage_data.values():  # DCP's _StorageInfo: the unpickler builds no other class
        if not isinstance(getattr(where, "relative_path", None), str):
            raise index_damaged(folder, "holds an entry that is not a place in a shard file")
        if where.relative_path not in sizes:
            raise index_damaged(
                folder, f"points at {where.relative_path[:100]!r}, which is not a shard file of the folder"
            )
        offset, length = getattr(where, "offset", None), getattr(where, "length", None)
        in_file = (
            is_int(offset) and is_int(length) and offset >= 0 and length >= 0
            and offset + length <= sizes[where.relative_path]
        )  # fmt: skip
        if getattr(where, "transform_descriptors", None) or not in_file:
            raise index_damaged(
                folder, f"points past the end of {where.relative_path}, or at an encoded slice"
            )
    for entry in placeholders(record):
        key = entry[PLACEHOLDER]
        described = entries.get(key)
        if not isinstance(described, TensorStorageMetadata):
            raise index_damaged(folder, f"has no tensor {key}")
        shape, dtype = list(entry["shape"]), dtype_named(entry["dtype"], folder)
        if list(described.size) != shape or described.properties.dtype != dtype:
            raise index_damaged(
                folder, f"describes {key} as {list(described.size)} {described.properties.dtype}, not {shape}"
            )
        covered = 0
        for chunk in described.chunks:
            ends = [start + size for start, size in zip(chunk.offsets, chunk.sizes, strict=False)]
            if (
                len(chunk.offsets) != len(shape)
                or len(chunk.sizes) != len(shape)
                or any(
                    start < 0 or end > whole
                    for start, end, whole in zip(chunk.offsets, ends, shape, strict=False)
                )
            ):
                raise index_damaged(folder, f"has a slice of {key} outside its shape {shape}")
            if MetadataIndex(key, chunk.offsets) not in metadata.storage_data:
                raise index_damaged(folder, f"says nowhere where a slice of {key} is stored")
            covered += math.prod(chunk.sizes)
        if covered != math.prod(shape):
            raise index_damaged(folder, f"covers {covered} of the {math.prod(shape)} values of {key}")


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def shard_files(folder: Path) -> list[Path]:
    return sorted(path for path in folder.iterdir() if path.suffix == ".distcp")


def checksummed_files(folder: Path) -> list[Path]:
    """What ``runner.pt`` holds checksums of: the shard files and DCP's index."""
    index = folder / METADATA
    return [*shard_files(folder), *([index] if index.is_file() else [])]


def file_checksum(path: Path) -> str:
    hasher = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            hasher.update(chunk)
    return f"sha256:{hasher.hexdigest()}"


def check_entries(folder: Path) -> None:
    """Only plain files: a link would make a read (runner's checksum, DCP's load) leave the folder."""
    odd = [path.name for path in folder.iterdir() if path.is_symlink() or not path.is_file()]
    if odd:
        raise CheckpointError(
            f"checkpoint {folder} is corrupted: {', '.join(sorted(odd)[:3])} is not a plain file (a save "
            "writes only files); use another checkpoint of the run"
        )


def check_shard_files(folder: Path, record: Mapping[str, Any]) -> None:
    """Every shard file the save wrote, and its index, each as it was written (a checkpoint saved before
    the index had a checksum is checked without it)."""
    expected = record.get(FILE_CHECKSUMS, {})
    if not isinstance(expected, Mapping):
        raise CheckpointError(
            f"checkpoint {folder} is corrupted: runner.pt's {FILE_CHECKSUMS} is not a mapping"
        )
    present = {path.name: path for path in checksummed_files(folder)}
    missing = sorted(str(name) for name in set(expected) - set(present))
    if missing:
        raise CheckpointError(f"checkpoint {folder} is incomplete: {', '.join(missing)} missing")
    changed = [name for name, digest in expected.items() if file_checksum(present[name]) != digest]
    if changed:
        raise CheckpointError(
            f"checkpoint {folder} is corrupted: {', '.join(changed)} changed on disk after it was saved; "
            "use another checkpoint of the run"
        )
    unchecked = sorted(set(present) - set(expected) - {METADATA})
    if expected and unchecked:
        raise CheckpointError(
            f"checkpoint {folder} is corrupted: {', '.join(unchecked[:3])} was not written by its save; "
            "use another checkpoint of the run"
        )


def check_folder(folder: Path, record: Mapping[str, Any]) -> None:
    """Before anything reads a sharded checkpoint's shards (when a resume finds it, or consolidate and
    eval read it): plain files only, every shard file and the index as they were written, and an index
    of tensors that the record and the shard files agree with. Each failure is a ``CheckpointError``,
    so a resume skips to the previous checkpoint, as it does for a damaged file."""
    check_entries(folder)
    check_shard_files(folder, record)
    check_metadata(folder, record)
