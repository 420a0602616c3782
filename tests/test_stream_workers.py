"""A stream that keeps its position (``state_dict()``), read by loader workers: a resumed run reads on
where the trained batches end, per worker (torchdata's StatefulDataLoader), without reading the pass
again, and trains as if it had not stopped."""

import sys

import pytest
import torch
from conftest import PLUGINS, read_scalars

BATCH, WORKERS = 4, 2


def setup(reads) -> tuple[str, ...]:
    """48 items, batches of 4, 2 workers: each worker's share is 24 items, 6 batches; 12 a pass."""
    return (
        "data=classification", "data.dataset._target_=positioned_streams.worker_shards",
        f"+data.dataset.reads={reads}", "data.dataset.num_train=48", "data.dataset.num_val=16",
        f"data.batch_size={BATCH}", f"data.num_workers={WORKERS}", "trainer.max_epochs=null",
        "trainer.log_every_n_steps=1", "checkpoint.every_n_steps=1", "trainer.val_every_n_steps=5",
    )  # fmt: skip


def reads_by_worker(reads, since: int) -> dict[int, list[int]]:
    """The items each process read, by process id, in the order the processes first read."""
    found: dict[int, list[int]] = {}
    for line in reads.read_text().splitlines()[since:]:
        pid, item = map(int, line.split())
        found.setdefault(pid, []).append(item)
    return found


def saved(run_dir):
    return torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)


@pytest.mark.parametrize("stop", [5, 12], ids=["mid-pass", "at-a-pass-end"])
def test_a_stream_read_by_workers_resumes_where_its_trained_batches_end(train_here, tmp_path, stop):
    reads = tmp_path / "reads.txt"
    straight = train_here(*setup(reads), "trainer.max_steps=16", run_dir=tmp_path / "straight")
    stopped = tmp_path / "stopped"
    train_here(*setup(reads), f"trainer.max_steps={stop}", run_dir=stopped)
    assert "stream_loader_state_dict" in saved(stopped)
    before = len(reads.read_text().splitlines())
    # Trained in the pass the stop is in: batch b is worker b % 2's (b // 2)-th, of items w, w + 2, ...
    trained = {b % 2 + WORKERS * (BATCH * (b // 2) + k) for b in range(stop % 12) for k in range(BATCH)}
    resumed = train_here(*setup(reads), "trainer.max_steps=16", f"resume={stopped}", run_dir=stopped)
    by_worker = reads_by_worker(reads, before)
    # The resumed pass's two workers start where their trained batches end, and read nothing trained.
    first_two = list(by_worker.values())[:2]
    done = [len([b for b in range(stop % 12) if b % 2 == worker]) for worker in range(WORKERS)]
    assert sorted(items[0] for items in first_two) == sorted(
        w + WORKERS * BATCH * done[w] for w in range(WORKERS)
    )
    assert not trained & {item for items in first_two for item in items}
    # What is left plus the read-ahead: the workers' 2 x 2 batches (prefetch_factor 2) and runner's window.
    assert sum(map(len, by_worker.values())) <= (16 - stop + WORKERS * 2 + 1) * BATCH
    first, second = saved(straight), saved(resumed)
    assert all(torch.equal(first["model_state_dict"][k], v) for k, v in second["model_state_dict"].items())
    assert read_scalars(straight)["train/loss"] == read_scalars(resumed)["train/loss"]
    assert [first[key] for key in ("global_step", "epoch")] == [
        second[key] for key in ("global_step", "epoch")
    ]


def test_a_streams_position_resumes_only_with_the_workers_that_read_it(train_here, tmp_path):
    """Each worker's position is in its part of the stream: another number of workers is named."""
    from runner.config.errors import UserError

    reads = tmp_path / "reads.txt"
    stopped = tmp_path / "stopped"
    train_here(*setup(reads), "trainer.max_steps=3", run_dir=stopped)
    with pytest.raises(UserError, match=r"data.num_workers=1: .* of 2 loader workers.*data.num_workers=2$"):
        train_here(*setup(reads), "data.num_workers=1", "trainer.max_steps=6", f"resume={stopped}",
                   run_dir=stopped)  # fmt: skip


def test_without_torchdata_a_stream_read_by_workers_is_read_again_and_the_run_says_so(monkeypatch, caplog):
    from torch.utils.data import DataLoader

    from runner.data.stream_state import training_loader_class

    monkeypatch.syspath_prepend(str(PLUGINS))
    from positioned_streams import worker_shards

    monkeypatch.setitem(sys.modules, "torchdata.stateful_dataloader", None)  # as if not installed
    stream, _ = worker_shards("unused", num_train=8, num_val=4)
    assert training_loader_class(stream, 2) is DataLoader
    assert "its position is kept only with torchdata installed (pip install torchdata)" in caplog.text
