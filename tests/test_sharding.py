"""strategy=fsdp and activation checkpointing in one process (a process group of one): the sharded
checkpoint format, its recovery after a killed save, consolidate, and the one-line errors. The
two-process behaviour is in test_fsdp.py."""

import os
import pickle
import shutil

import pytest
import torch
from conftest import read_scalars

from runner.checkpoint.files import CheckpointError, atomic_save, checkpoint_files, load_checkpoint
from runner.checkpoint.locate import own_checkpoint
from runner.checkpoint.sharded_checks import FILE_CHECKSUMS, METADATA
from runner.cli.main import main
from runner.config.errors import ConfigError
from runner.data import load_text
from runner.models import char_transformer

# A small transformer of identical blocks on the bundled text: 257 training windows, 32 per batch.
TRANSFORMER = (
    "data=text", "model=char_transformer", "model.layers=2", "model.width=32", "trainer.max_steps=6",
    "trainer.log_every_n_steps=1", "trainer.val_every_n_steps=3", "checkpoint.every_n_steps=2",
    "checkpoint.every_n_epochs=null",
)  # fmt: skip


def drop_index(checksums: dict) -> dict:
    return {name: digest for name, digest in checksums.items() if name != METADATA}


def consolidated_weights(run_dir, name="last"):
    from runner.checkpoint.sharded import consolidated

    folder = run_dir / "checkpoints" / name
    return consolidated(folder, load_checkpoint(folder))["model_state_dict"]


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_activation_checkpointing_gives_bit_identical_losses_and_weights(
    train_here, tmp_path, caplog, strategy
):
    """Dropout on: the recomputed forward must draw the same masks as the first one."""
    runs = {}
    for recompute in (False, True):
        runs[recompute] = train_here(
            *TRANSFORMER, "model.dropout=0.1", f"strategy={strategy}",
            f"activation_checkpointing={recompute}", run_dir=tmp_path / f"recompute_{recompute}",
        )  # fmt: skip
    assert "activation ckpt  2 blocks (Block): activations recomputed in backward" in caplog.text
    plain, recomputed = read_scalars(runs[False]), read_scalars(runs[True])
    for tag in ("train/loss", "train/grad_norm", "val/loss"):
        assert recomputed[tag] == plain[tag], tag
    if strategy == "ddp":
        weights = [torch.load(run / "checkpoints" / "last.pt")["model_state_dict"] for run in runs.values()]
    else:
        weights = [consolidated_weights(run) for run in runs.values()]
    for key in weights[0]:
        assert torch.equal(weights[0][key], weights[1][key]), key


def test_sharded_checkpoints_are_whole_folders_and_consolidate_to_a_plain_file(train_here, caplog, capsys):
    run_dir = train_here(*TRANSFORMER, "strategy=fsdp")
    folder = run_dir / "checkpoints"
    assert sorted(path.name for path in folder.iterdir()) == [
        "best", "last", "step_00000004", "step_00000006",
    ]  # fmt: skip
    assert "strategy         fsdp (FSDP2): 2 blocks (Block) sharded one by one, then the rest" in caplog.text
    assert "memory           parameters " in caplog.text and "per process (one process)" in caplog.text
    assert "best/ on val/loss (min), last/, sharded folders" in caplog.text
    assert checkpoint_files(folder)[0].name == "last"
    record = torch.load(folder / "last" / "runner.pt", weights_only=True)  # plain data only
    assert record["global_step"] == 6 and record["world_size"] == 1
    # step 6 validated and improved: step_00000006, best and last are one write under three names.
    assert os.stat(folder / "last" / "runner.pt").st_nlink == 3

    main(["consolidate", str(run_dir)])
    written = run_dir / "consolidated" / "last.pt"
    assert f"wrote {written}" in capsys.readouterr().out
    plain = torch.load(written, weights_only=True)
    assert {"model_state_dict", "optimizer_state_dict", "epoch", "best_val", "global_step"} <= set(plain)
    assert isinstance(next(iter(plain["optimizer_state_dict"]["state"])), int)  # optimizer.state_dict()'s
    model = char_transformer([64], 53, width=32, layers=2)
    model.load_state_dict(plain["model_state_dict"])  # strict: every key, whole tensors
    torch.optim.Adam(model.parameters()).load_state_dict(plain["optimizer_state_dict"])
    _, val = load_text(seq_len=64, stride=16, val_fraction=0.15)
    inputs = torch.stack([val[i][0] for i in range(len(val))])
    targets = torch.stack([val[i][1] for i in range(len(val))])
    model.eval()
    with torch.no_grad():
        loss = torch.nn.functional.cross_entropy(model(inputs), targets).item()
    logged = dict(read_scalars(run_dir)["val/loss"])[6]
    assert loss == pytest.approx(logged, rel=1e-5)
    with pytest.raises(SystemExit) as exit_info:
        main(["consolidate", str(run_dir)])  # a file already there is kept
    assert exit_info.value.code == 2
    assert "already exists" in capsys.readouterr().err


def test_a_killed_save_leaves_the_previous_checkpoint_newest_and_the_next_run_cleans_up(train_here, caplog):
    run_dir = train_here(*TRANSFORMER, "strategy=fsdp")
    folder = run_dir / "checkpoints"
    # What a save killed before its commit leaves: shards and index, no record, under a temporary name;
    # and a crash between the two renames of a replaced folder: the old one moved aside.
    shutil.copytree(folder / "step_00000006", folder / ".step_00000008.tmp")
    (folder / ".step_00000008.tmp" / "runner.pt").unlink()
    os.replace(folder / "best", folder / ".best.old")
    found = own_checkpoint(run_dir)
    assert found is not None and found.path.name == "last" and found.checkpoint["global_step"] == 6
    assert [path.name for path in checkpoint_files(folder)] == ["last", "step_00000006", "step_00000004"]

    train_here(*TRANSFORMER, "strategy=fsdp", "resume=auto", "trainer.max_steps=8", run_dir=run_dir)
    assert "removed 1 unfinished sharded save(s)" in caplog.text and ".step_00000008.tmp" in caplog.text
    assert not [path for path in folder.iterdir() if path.name.startswith(".")]
    assert (folder / "best").is_dir()  # put back, then replaced if a later validation improved
    assert load_checkpoint(folder / "step_00000008")["global_step"] == 8


def test_a_tampered_sharded_checkpoint_is_refused_before_anything_runs(train_here, tmp_path):
    run_dir = train_here(*TRANSFORMER, "strategy=fsdp", "trainer.max_steps=2")
    folder = run_dir / "checkpoints" / "last"
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    index = (folder / ".metadata").read_bytes()
    (folder / ".metadata").write_bytes(pickle.dumps(Payload()))
    with pytest.raises(CheckpointError, match=r"\.metadata changed on disk after it was saved"):
        consolidated_weights(run_dir)
    record = load_checkpoint(folder)  # as a runner that wrote no checksum of the index saved it
    atomic_save({**record, FILE_CHECKSUMS: drop_index(record[FILE_CHECKSUMS])}, folder / "runner.pt")
    with pytest.raises(CheckpointError, match=r"its index \(\.metadata\) was refused"):
        consolidated_weights(run_dir)
    assert not marker.exists()

    (folder / ".metadata").write_bytes(index)
    shard = folder / "__0_0.distcp"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"__0_0\.distcp changed on disk"):
        consolidated_weights(run_dir)


def test_wrong_blocks_are_one_line_errors_naming_the_key(train_here):
    with pytest.raises(ConfigError, match=r"fsdp.wrap=\['Nope'\]: the model has no module of class Nope; its "
                       r"module classes \(how many\): .*Block \(2\)"):  # fmt: skip
        train_here(*TRANSFORMER, "strategy=fsdp", "fsdp.wrap=[Nope]")
    with pytest.raises(
        ConfigError, match=r"activation_checkpointing=true: Sequential has no repeated blocks"
    ):
        train_here("data=classification", "trainer.max_steps=1", "activation_checkpointing=true")


def test_resume_from_an_older_checkpoint_keeps_what_it_writes(train_here, capsys):
    """Newer step folders of the abandoned future are there; the new ones are never pruned for them."""
    run_dir = train_here(*TRANSFORMER, "strategy=fsdp", "trainer.max_steps=8", "checkpoint.keep_last=3")
    folder = run_dir / "checkpoints"
    train_here(*TRANSFORMER, "strategy=fsdp", f"resume={folder / 'step_00000004'}", "checkpoint.keep_last=1",
               "checkpoint.save_best=false", run_dir=run_dir)  # fmt: skip
    assert load_checkpoint(folder / "last")["global_step"] == 6
    assert (folder / "step_00000006").is_dir()

    # A shard that changed on disk: resume skips that checkpoint (and its other names) for a valid one.
    shard = folder / "last" / "__0_0.distcp"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    found = own_checkpoint(run_dir)
    assert found is not None and found.checkpoint["global_step"] == 8
    assert "skipping checkpoint" in capsys.readouterr().err


def test_the_record_file_alone_and_an_unwritable_output_are_one_line_errors(train_here, tmp_path, capsys):
    run_dir = train_here(*TRANSFORMER, "strategy=fsdp", "trainer.max_steps=2")
    with pytest.raises(CheckpointError, match="is the record of a sharded checkpoint"):
        load_checkpoint(run_dir / "checkpoints" / "last" / "runner.pt")
    (tmp_path / "a_file").write_text("")
    with pytest.raises(SystemExit) as exit_info:
        main(["consolidate", str(run_dir), "--output", str(tmp_path / "a_file" / "x.pt")])
    assert exit_info.value.code == 2
    assert "runner: error: consolidate: cannot write" in capsys.readouterr().err
