"""Checkpoint files: written durably, loaded safely, checked for corruption, found in a run's folder.

A checkpoint is a plain dict that ``torch.load(path, weights_only=True)`` reads with nothing else
(see ``contents.py`` for what is in one). Nothing in it is a numpy object or a pickled class. Each
file carries a checksum of its contents (``checksum``), required and verified when it is loaded:
torch's reader does not check the archive's own CRCs, so a flipped byte inside a tensor would
otherwise load.
"""

import hashlib
import pickle
import zipfile
from collections.abc import Mapping, Set
from pathlib import Path
from typing import Any

import torch

from runner.checkpoint.durable import atomic_write
from runner.checkpoint.ranges import out_of_range
from runner.checkpoint.state import saved_keys, saved_kinds
from runner.config.errors import UserError

CHECKPOINT_DIR = "checkpoints"
FORMAT_VERSION = 1
RECORD = "runner.pt"  # in a sharded checkpoint's folder: everything but the shards (see sharded.py)


class CheckpointError(UserError):
    """A checkpoint that cannot be used; the message names the file and what to do."""


CHECKSUM_KEY = "checksum"


class TooMuchWork(Exception):
    """A checkpoint whose contents are far more than its file holds (values shared many times over)."""


class NotData(Exception):
    """A tensor runner never saves, whose bytes cannot be read: a meta tensor (none), a sparse one."""


# The work a file's checksum may take, per byte of the file (and a floor for tiny files): each value
# pickle writes takes at least a byte, a tensor's data its bytes, so only values that the file shares
# many times over (40 levels of {"a": x, "b": x}: 2**40 values from a few KB) or tensors that view one
# storage many times over take more.
WORK_PER_BYTE, WORK_FLOOR = 4, 1 << 20


class Budget:
    """What a walk of a loaded checkpoint may still do: values visited plus bytes hashed."""

    def __init__(self, left: float) -> None:
        self.left = left

    def spend(self, amount: int) -> None:
        self.left -= amount
        if self.left < 0:
            raise TooMuchWork


UNBOUNDED = Budget(float("inf"))  # runner's own payloads, checksummed before they are saved


def _digest(value: Any, hasher: Any, budget: Budget) -> None:
    """Feed ``value`` to ``hasher`` in a fixed order: every tensor's dtype, shape and bytes, every
    other value's type and text. Each value and byte is paid for from ``budget`` before it is read."""
    budget.spend(1)
    if isinstance(value, torch.Tensor) and (value.is_meta or value.layout != torch.strided):
        raise NotData(f"a {'meta' if value.is_meta else str(value.layout).removeprefix('torch.')} tensor")
    if isinstance(value, torch.Tensor):
        budget.spend(value.numel() * value.element_size())  # before a view of 1 value becomes 10**12
        tensor = value.detach().cpu().contiguous().reshape(-1)
        hasher.update(f"tensor {tensor.dtype} {list(value.shape)};".encode())
        hasher.update(tensor.view(torch.uint8).numpy())
    elif isinstance(value, Mapping):
        hasher.update(f"dict {len(value)};".encode())
        for key, item in value.items():
            _digest(key, hasher, budget)
            _digest(item, hasher, budget)
    elif isinstance(value, list | tuple):
        hasher.update(f"{type(value).__name__} {len(value)};".encode())
        for item in value:
            _digest(item, hasher, budget)
    else:
        text = f"{type(value).__name__} {value!r};"
        budget.spend(len(text))  # one long string, shared a million times, is hashed a million times
        hasher.update(text.encode())


def checksum(payload: Mapping[str, Any], budget: Budget = UNBOUNDED) -> str:
    """SHA-256 of a checkpoint's contents, its own ``checksum`` entry left out; ``TooMuchWork`` where
    that takes more than ``budget``."""
    hasher = hashlib.sha256()
    _digest({key: value for key, value in payload.items() if key != CHECKSUM_KEY}, hasher, budget)
    return f"sha256:{hasher.hexdigest()}"


def atomic_save(payload: dict[str, Any], path: Path) -> None:
    """Durably (``durable.atomic_write``: a crash or a full disk at any instant leaves either the old
    file or the new one), with the checksum of ``payload``."""
    atomic_write(path, lambda handle: torch.save({**payload, CHECKSUM_KEY: checksum(payload)}, handle))


# What resume and eval read from every checkpoint (``contents.py`` writes them all): a file that lacks
# one is refused by name, not met by a KeyError half-way through a resume.
REQUIRED_KEYS = (
    "model_state_dict", "optimizer_state_dict", "scheduler_state_dict", "scaler_state_dict", *saved_keys(),
    "stop_reason", "rng_states", "config", "seed", "world_size", "planned",
)  # fmt: skip


# What each key read on resume and eval holds: a file whose checksum matches but whose keys hold something
# else (a forged one) is refused by name, not met by a TypeError half-way through.
KINDS: dict[str, tuple[type, ...]] = {
    **dict.fromkeys(("model_state_dict", "optimizer_state_dict", "scheduler_state_dict"), (dict,)),
    **dict.fromkeys(("scaler_state_dict", "rng_states", "config", "planned"), (dict,)),
    **saved_kinds(), "stop_reason": (str, type(None)), "seed": (int,), "world_size": (int,),
}  # fmt: skip


# The keys a checkpoint holds only sometimes (``contents.py``), and what each holds where it is.
OPTIONAL_KINDS: dict[str, tuple[type, ...]] = {
    **dict.fromkeys(("averaged_model_state_dict", "callbacks_state_dict", "dataset_state_dict",
                     "carried_state_dict", "sampler_state_dict", "versions"), (dict,)),
    "frozen_weights_sha256": (str,), "micro_batches_done_in_window": (int,), "monitor": (str,),
}  # fmt: skip
WEIGHTS = ("model_state_dict", "averaged_model_state_dict")  # name -> tensor, as load_state_dict takes


def wrong_kinds(checkpoint: Mapping[str, Any], sharded: bool = False) -> list[str]:
    """``key (type)`` for each key whose value is not of its kind (a bool is not a number here), and each
    weight that is not a tensor (``sharded``: or a sharded checkpoint's place for one)."""
    kinds = {**KINDS, **{key: kind for key, kind in OPTIONAL_KINDS.items() if key in checkpoint}}
    wrong = [
        f"{key} ({type(checkpoint[key]).__name__})" for key, kind in kinds.items()
        if not isinstance(checkpoint[key], kind) or (isinstance(checkpoint[key], bool) and bool not in kind)
    ]  # fmt: skip
    for key in (key for key in WEIGHTS if key in checkpoint and isinstance(checkpoint[key], dict)):
        wrong += [
            f"{key}[{one_line(name)}] ({type(value).__name__})" for name, value in checkpoint[key].items()
            if not isinstance(name, str) or not (is_weight(value, sharded) or is_extra_state(name))
        ]  # fmt: skip
    return wrong


def is_weight(value: Any, sharded: bool) -> bool:
    """A tensor with data (a meta tensor has none), or in a sharded checkpoint's record its place."""
    if isinstance(value, torch.Tensor):
        return value.layout == torch.strided and not value.is_meta
    return sharded and isinstance(value, Mapping) and "__sharded__" in value


def is_extra_state(name: str) -> bool:
    """A module's ``get_extra_state()``: any value ``load_state_dict`` hands back to it."""
    return name.rsplit(".", 1)[-1] == "_extra_state"


def one_line(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:60] + "..."


def looks_like_torch_save(path: Path) -> bool:
    """``torch.save``'s zip archive, or its older pickle format (which starts with a pickle opcode)."""
    with open(path, "rb") as handle:
        start = handle.read(4)
    return start.startswith(b"PK\x03\x04") or start[:1] == b"\x80"


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Load with ``weights_only=True`` (never anything else): a file that carries pickled code is
    refused before any of it runs. A file without its checksum, or whose checksum does not match its
    contents, is refused. A sharded checkpoint's folder gives its record (``sharded.py`` checks and
    reads the shards)."""
    if is_sharded_folder(path):
        return load_checkpoint_file(path / RECORD)
    if path.name == RECORD and is_sharded_folder(path.parent):
        raise CheckpointError(
            f"checkpoint {path} is the record of a sharded checkpoint, not a checkpoint of its own; "
            f"give its folder, {path.parent}"
        )
    return load_checkpoint_file(path)


def load_checkpoint_file(path: Path) -> dict[str, Any]:
    try:
        if path.is_dir():
            inside = path / CHECKPOINT_DIR if (path / CHECKPOINT_DIR).is_dir() else path
            raise CheckpointError(f"checkpoint {path} is a folder; give a file, such as {inside / 'best.pt'}")
        if not path.exists():
            raise CheckpointError(f"checkpoint {path} does not exist")
        if not path.is_file():
            raise CheckpointError(f"checkpoint {path} is not a regular file; give a .pt file")
        if not looks_like_torch_save(path):
            raise CheckpointError(
                f"checkpoint {path} is not a checkpoint file (torch.save writes a zip archive; this "
                "file is not one); give a .pt file from a run's checkpoints/ folder"
            )
    except OSError as error:
        raise CheckpointError(f"checkpoint {path} cannot be read ({error.strerror or error})") from None
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        if "Weights only load failed" in str(error):
            reason = str(error).split("\n\n")[-1].splitlines()[0] if "\n" in str(error) else str(error)
            raise CheckpointError(
                f"checkpoint {path} was refused: it holds pickled objects that are not plain data "
                f"and could run code when loaded ({reason.strip()}); runner loads only with "
                "weights_only=True. Do not load it unless you trust where it came from."
            ) from None
        raise CheckpointError(f"checkpoint {path} is corrupted ({str(error).splitlines()[0]})") from None
    except (RuntimeError, EOFError, OSError, zipfile.BadZipFile, ValueError) as error:
        first_line = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise CheckpointError(f"checkpoint {path} is truncated or corrupted ({first_line})") from None
    except Exception as error:  # a flipped bit in the pickle: the unpickler's stack or memo ends early
        first_line = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}".rstrip(
            ": "
        )
        raise CheckpointError(f"checkpoint {path} is truncated or corrupted ({first_line})") from None
    lacking = [key for key in REQUIRED_KEYS if not isinstance(checkpoint, dict) or key not in checkpoint]
    if lacking:
        raise CheckpointError(f"checkpoint {path} is not a runner checkpoint (it lacks {_listing(lacking)})")
    stored = checkpoint.pop(CHECKSUM_KEY, None)
    if stored is None:
        raise CheckpointError(
            f"checkpoint {path} is not a valid runner checkpoint: it has no checksum (runner writes one "
            "with every checkpoint), so its contents cannot be checked; use another checkpoint of the run"
        )
    try:
        computed = checksum(checkpoint, Budget(WORK_PER_BYTE * path.stat().st_size + WORK_FLOOR))
    except RecursionError:  # runner's own checkpoints nest a few levels; this one was made to be deep
        raise CheckpointError(
            f"checkpoint {path} is corrupted: its contents are nested too deeply for a runner checkpoint; "
            "use another checkpoint of the run"
        ) from None
    except TooMuchWork:
        raise CheckpointError(
            f"checkpoint {path} is not a runner checkpoint: its contents take far more work to check than a "
            "file of its size holds (values shared many times over); use another checkpoint of the run"
        ) from None
    except NotData as error:
        raise CheckpointError(
            f"checkpoint {path} is not a runner checkpoint: it holds {error}, which runner never saves; use "
            "another checkpoint of the run"
        ) from None
    except ValueError as error:  # an integer too long to show as text
        raise CheckpointError(f"checkpoint {path} is corrupted ({str(error).splitlines()[0]})") from None
    if stored != computed:
        raise CheckpointError(
            f"checkpoint {path} is corrupted: its contents do not match the checksum written with it "
            "(the file changed on disk after it was saved); use another checkpoint of the run"
        )
    wrong = wrong_kinds(checkpoint, sharded=path.name == RECORD) or out_of_range(checkpoint)
    if wrong:
        verb = "does" if len(wrong) == 1 else "do"
        raise CheckpointError(
            f"checkpoint {path} is not a runner checkpoint: {_listing(wrong)} {verb} not hold what runner "
            "saves there; use another checkpoint of the run"
        )
    return checkpoint


def _listing(names: list[str], limit: int = 6) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def shape_of(value: Any) -> list[int]:
    """A tensor's shape, or a sharded checkpoint's placeholder's (the whole tensor's)."""
    return list(value.shape) if isinstance(value, torch.Tensor) else list(value["shape"])


def check_state_dict_fits(
    module: torch.nn.Module,
    state_dict: dict[str, torch.Tensor],
    path: Path,
    leave_out: Set[str] = frozenset(),
) -> None:
    """Strict loading, with the debugging checklist's advice: name missing keys, unexpected keys and shape
    mismatches instead of a wall of text from ``load_state_dict``. ``leave_out``: keys the checkpoint
    does not hold (a trainable-only checkpoint's frozen ones, ``trainable.py``)."""
    expected = {key: value for key, value in module.state_dict().items() if key not in leave_out}
    missing = [key for key in expected if key not in state_dict]
    unexpected = [key for key in state_dict if key not in expected]
    mismatched = [
        f"{key} (checkpoint {shape_of(state_dict[key])}, model {list(expected[key].shape)})"
        for key in expected
        if key in state_dict
        and not is_extra_state(key)
        and shape_of(state_dict[key]) != list(expected[key].shape)
    ]
    mistyped = [
        f"{key} (checkpoint {state_dict[key].dtype}, model {expected[key].dtype})"
        for key in expected
        if isinstance(state_dict.get(key), torch.Tensor) and kind(state_dict[key]) != kind(expected[key])
    ]
    problems = [f"other kinds of number: {_listing(mistyped)}"] if mistyped else []
    if missing:
        problems.append(f"missing keys: {_listing(missing)}")
    if unexpected:
        problems.append(f"unexpected keys: {_listing(unexpected)}")
    if mismatched:
        problems.append(f"shape mismatches: {_listing(mismatched)}")
    if problems:
        raise CheckpointError(
            f"checkpoint {path} does not fit this model: "
            + "; ".join(problems)
            + ". Check the architecture and key names (compare state_dict().keys()); "
            "the model config must match the one the checkpoint was saved with"
        )


def kind(tensor: torch.Tensor) -> tuple[bool, bool]:
    """Complex, floating point, or neither: loading casts between dtypes of one kind, and between kinds
    would drop an imaginary part or a fraction silently."""
    return tensor.is_complex(), tensor.is_floating_point()


def is_sharded_folder(path: Path) -> bool:
    """A sharded checkpoint (``strategy=fsdp``): a folder that holds its record and DCP's index. Only a
    complete one is under its own name (a save writes into ``.<name>.tmp``)."""
    return path.is_dir() and (path / RECORD).is_file() and (path / ".metadata").is_file()


def written_at(path: Path) -> int:
    """When a checkpoint was written: a file's time, or its folder's record's (written last)."""
    return (path / RECORD if path.is_dir() else path).stat().st_mtime_ns


def checkpoint_files(folder: Path) -> list[Path]:
    """A run's checkpoints (files, and folders of sharded ones), newest first."""
    if not folder.is_dir():
        return []
    found = [
        path for path in folder.iterdir()
        if not path.name.startswith(".")
        and ((path.suffix == ".pt" and path.is_file()) or is_sharded_folder(path))
    ]  # fmt: skip
    # last and best of one moment (hard links of one another when sharded) are equally new: last first.
    return sorted(found, key=lambda path: (written_at(path), path.stem == "last"), reverse=True)
