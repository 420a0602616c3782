"""A damaged or forged sharded checkpoint (strategy=fsdp) is "corrupted", never a traceback: resume skips
it for the previous checkpoint, as it does a damaged file, and DCP never reads outside the folder. Each
corruption is tried on a checkpoint with a checksum of its index (runner.pt) and on one saved without
(by an older runner): then the index itself is checked."""

import os
import pickle
import shutil
import struct

import pytest
from conftest import run_cli

from runner.checkpoint.files import atomic_save, checkpoint_files, load_checkpoint
from runner.checkpoint.locate import own_checkpoint
from runner.checkpoint.sharded_checks import FILE_CHECKSUMS, METADATA, MetadataUnpickler

TRANSFORMER = (
    "data=text", "model=char_transformer", "model.layers=2", "model.width=32", "trainer.log_every_n_steps=1",
    "trainer.val_every_n_steps=100", "checkpoint.every_n_steps=2", "checkpoint.every_n_epochs=null",
    "checkpoint.save_best=false", "checkpoint.keep_last=5", "strategy=fsdp",
)  # fmt: skip


def read_index(folder):
    with open(folder / METADATA, "rb") as handle:
        return MetadataUnpickler(handle).load()


def write_index(folder, metadata) -> None:
    (folder / METADATA).write_bytes(pickle.dumps(metadata))


def moved_outside(folder, tmp_path) -> None:
    """The index points at a copy of the shard file outside the folder."""
    outside = tmp_path / "elsewhere.distcp"
    shutil.copy2(folder / "__0_0.distcp", outside)
    metadata = read_index(folder)
    for where in metadata.storage_data.values():
        where.relative_path = os.path.relpath(outside, folder)
    write_index(folder, metadata)


def slice_missing(folder, tmp_path) -> None:
    """What DCP's load raised a CheckpointException (a BaseException) for: a slice without a place."""
    metadata = read_index(folder)
    metadata.storage_data.pop(next(iter(metadata.storage_data)))
    write_index(folder, metadata)


def past_the_end(folder, tmp_path) -> None:
    metadata = read_index(folder)
    next(iter(metadata.storage_data.values())).offset = 10**12
    write_index(folder, metadata)


def linked_shard(folder, tmp_path) -> None:
    outside = tmp_path / "linked.distcp"
    shutil.copy2(folder / "__0_0.distcp", outside)
    (folder / "__0_0.distcp").unlink()
    (folder / "__0_0.distcp").symlink_to(outside)


CORRUPTIONS = {
    # A pickle whose length fields make the unpickler raise MemoryError and OverflowError.
    "index-memory-error": lambda folder, tmp: (folder / METADATA).write_bytes(
        b"\x80\x04\x8e" + struct.pack("<Q", 2**62) + b"x"
    ),
    "index-overflow-error": lambda folder, tmp: (folder / METADATA).write_bytes(
        b"\x80\x04\x8d" + struct.pack("<Q", 2**63 + 5) + b"x"
    ),
    "index-names-a-path-outside": moved_outside,
    "index-slice-missing": slice_missing,
    "index-slice-past-the-end": past_the_end,
    "shard-is-a-link-outside": linked_shard,
    "extra-shard-file": lambda folder, tmp: shutil.copy2(folder / "__0_0.distcp", folder / "__1_0.distcp"),
}
REASONS = {
    "index-memory-error": "MemoryError",
    "index-overflow-error": "OverflowError",
    "index-names-a-path-outside": "which is not a shard file of the folder",
    "index-slice-missing": "says nowhere where a slice of",
    "index-slice-past-the-end": "points past the end of __0_0.distcp",
    "shard-is-a-link-outside": "__0_0.distcp is not a plain file",
    "extra-shard-file": "__1_0.distcp was not written by its save",
}


def without_index_checksum(folder) -> None:
    """The folder as a runner from before the index's checksum saved it."""
    record = load_checkpoint(folder)
    checksums = {name: digest for name, digest in record[FILE_CHECKSUMS].items() if name != METADATA}
    atomic_save({**record, FILE_CHECKSUMS: checksums}, folder / "runner.pt")


@pytest.fixture(scope="module")
def sharded_run(tmp_path_factory):
    """Checkpoints at steps 2 and 4 (last is step 4's folder under a second name), by the real CLI."""
    where = tmp_path_factory.mktemp("sharded")
    result = run_cli("train", *TRANSFORMER, "trainer.max_steps=4", "hydra.run.dir=run", cwd=where)
    assert result.returncode == 0, result.stderr
    return where / "run"


@pytest.mark.parametrize("index_checksum", [True, False], ids=["with-index-checksum", "older-runner"])
@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
def test_a_corrupted_sharded_checkpoint_is_skipped_for_the_previous_one(
    sharded_run, tmp_path, capsys, corruption, index_checksum
):
    run_dir = tmp_path / "run"
    shutil.copytree(sharded_run, run_dir)  # copies: no folder shares files with another any more
    folder = run_dir / "checkpoints"
    newest = [path for path in checkpoint_files(folder) if load_checkpoint(path)["global_step"] == 4]
    assert sorted(path.name for path in newest) == ["last", "step_00000004"]
    for path in newest:
        if not index_checksum:
            without_index_checksum(path)
        CORRUPTIONS[corruption](path, tmp_path)
    found = own_checkpoint(run_dir)
    assert found is not None and found.path.name == "step_00000002" and found.checkpoint["global_step"] == 2
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(warnings) == 2 and all("is corrupted" in line for line in warnings), warnings
    expected = REASONS[corruption]
    if index_checksum and corruption.startswith("index-"):
        expected = f"{METADATA} changed on disk after it was saved"
    assert all(expected in line for line in warnings), warnings


@pytest.mark.slow
def test_resume_through_the_cli_falls_back_and_continues(sharded_run, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(sharded_run, run_dir)
    for name in ("last", "step_00000004"):
        without_index_checksum(run_dir / "checkpoints" / name)
        CORRUPTIONS["index-memory-error"](run_dir / "checkpoints" / name, tmp_path)
    result = run_cli("train", f"resume={run_dir}", "trainer.max_steps=6", cwd=tmp_path, timeout=180)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert "skipping checkpoint" in result.stderr and "MemoryError" in result.stderr
    assert f"{run_dir / 'checkpoints' / 'step_00000002'} (step 2, epoch 0)" in result.stdout + result.stderr
    assert load_checkpoint(run_dir / "checkpoints" / "last")["global_step"] == 6
