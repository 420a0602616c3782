"""``runner consolidate``: a sharded checkpoint (``strategy=fsdp``) as one plain file, for ``eval``,
export, or any code that loads a checkpoint with ``torch.load(path, weights_only=True)``.

The file has a plain checkpoint's keys (``model_state_dict`` with whole tensors, ``optimizer_state_dict``
as ``optimizer.state_dict()`` gives it, ``epoch``, ``best_val``, ...). Read in one process: no
process group, no GPU.
"""

from pathlib import Path

from runner.checkpoint.durable import writing
from runner.checkpoint.files import (
    CHECKPOINT_DIR,
    CheckpointError,
    atomic_save,
    is_sharded_folder,
    load_checkpoint,
)
from runner.checkpoint.files import checkpoint_files as checkpoints_in
from runner.checkpoint.sharded import FILE_CHECKSUMS, consolidated


def sharded_checkpoint(source: Path) -> Path:
    """``source`` itself, or the newest sharded checkpoint of a run directory (or its checkpoints/)."""
    if is_sharded_folder(source):
        return source
    folder = source / CHECKPOINT_DIR if (source / CHECKPOINT_DIR).is_dir() else source
    sharded = [path for path in checkpoints_in(folder) if path.is_dir()]
    if not source.is_dir() or not sharded:
        what = (
            "is a file"
            if source.is_file()
            else "holds no sharded checkpoint"
            if source.is_dir()
            else ("does not exist")
        )
        raise CheckpointError(
            f"consolidate {source}: it {what}; give a sharded checkpoint folder (a strategy=fsdp run's "
            f"{CHECKPOINT_DIR}/best, last or step_<N>) or the run directory"
        )
    return sharded[0]


def consolidate(source: Path, output: Path | None = None) -> tuple[Path, Path]:
    """Write the plain file (default: ``<run dir>/consolidated/<name>.pt``, outside ``checkpoints/``, so
    a resume still continues from the sharded folders); return the folder and the file. An existing
    file is not replaced."""
    folder = sharded_checkpoint(source)
    if output is None and folder.parent.name == CHECKPOINT_DIR:
        output = folder.parent.parent / "consolidated" / f"{folder.name}.pt"
    output = output or folder.with_suffix(".pt")  # a folder outside a run: beside it
    if output.exists():
        raise CheckpointError(f"consolidate: {output} already exists; remove it or give --output FILE")
    payload = consolidated(folder, load_checkpoint(folder))
    payload.pop(FILE_CHECKSUMS, None)
    try:
        with writing(output):
            output.parent.mkdir(parents=True, exist_ok=True)
            atomic_save(payload, output)
    except OSError as error:  # a path that cannot be a file (a refused write is a WriteError already)
        raise CheckpointError(f"consolidate: cannot write {output} ({error.strerror or error})") from None
    return folder, output
