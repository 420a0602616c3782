"""Test-only data: a stream that each loader worker reads its share of, keeping its position in its
state_dict (as a sharded file reader does), and writing down every item it reads."""

import os

from torch.utils.data import IterableDataset, get_worker_info

from runner.data import make_classification


class WorkerShards(IterableDataset):
    """Worker ``w`` of ``n`` reads items ``w, w + n, w + 2n, ...``; each read is a line ``pid item`` in
    the file ``reads``."""

    def __init__(self, inner, reads: str) -> None:
        self.inner, self.reads = inner, reads
        self.position = 0  # in this reader's share

    def share(self) -> range:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        return range(worker, len(self.inner), workers)

    def __iter__(self):
        share = self.share()
        while self.position < len(share):
            item = share[self.position]
            self.position += 1
            with open(self.reads, "a") as reads:
                reads.write(f"{os.getpid()} {item}\n")
            yield self.inner[item]
        self.position = 0

    def state_dict(self) -> dict:
        return {"position": self.position}

    def load_state_dict(self, state: dict) -> None:
        self.position = state["position"]


def worker_shards(reads: str, **kwargs):
    train, val = make_classification(**kwargs)
    return WorkerShards(train, reads), val
