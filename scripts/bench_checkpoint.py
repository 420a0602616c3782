"""How long a checkpoint save pauses the training loop, on a 52 M-parameter model with Adam's state
(about 630 MB): runner's save (a copy into buffers kept from save to save, the file written by a thread)
against a plain ``torch.save`` on the loop's thread and against one memory copy of the state (into
buffers already there, and into fresh ones: the copy runner made before).

    python scripts/bench_checkpoint.py                 # 52 M parameters, 5 saves each
    python scripts/bench_checkpoint.py --width 512 --saves 2   # a quick look
    python scripts/bench_checkpoint.py --device cuda   # the state on a GPU: pinned buffers, a copy stream

Each save comes after the previous write ended (a loop that saves every few hundred steps); the first
of runner's saves, which allocates the buffers, is shown apart. Medians, in seconds.
"""

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

from runner.checkpoint.policy import PeriodicCheckpointer
from runner.checkpoint.state import TrainState


def model_and_optimizer(
    width: int, layers: int, device: torch.device
) -> tuple[nn.Module, torch.optim.Optimizer]:
    model = nn.Sequential(*(nn.Linear(width, width) for _ in range(layers))).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.randn(2, width, device=device)).sum().backward()
    optimizer.step()  # Adam's two moments per weight: the state is three times the weights
    return model, optimizer


def timed(action, repeats: int, device: torch.device) -> list[float]:
    """Wall time of ``action``, the device's work included (a copy's end is waited for)."""
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        action()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        seconds.append(time.perf_counter() - started)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--width", type=int, default=3600, help="of each square layer (3600 x 4: 52 M)")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--saves", type=int, default=5)
    parser.add_argument("--device", default="cpu", help="where the state lives: cpu or cuda")
    args = parser.parse_args()
    device = torch.device(args.device)
    model, optimizer = model_and_optimizer(args.width, args.layers, device)

    def payload(state: TrainState | None = None) -> dict:
        return {
            "model_state_dict": model.state_dict(),
            "optimizer_state_dict": optimizer.state_dict(),
            "global_step": 0 if state is None else state.step,
        }

    tensors = [value for value in payload()["model_state_dict"].values()]
    tensors += [t for state in optimizer.state.values() for t in state.values() if t.numel() > 1]
    size = sum(t.numel() * t.element_size() for t in tensors)
    parameters = sum(p.numel() for p in model.parameters())
    threads = torch.get_num_threads()
    print(f"{parameters / 1e6:.1f} M parameters, state {size / 1e6:.0f} MB, {threads} threads")

    buffers = [torch.empty(t.shape, dtype=t.dtype, pin_memory=t.is_cuda) for t in tensors]

    def copy_into_kept() -> None:
        for buffer, tensor in zip(buffers, tensors, strict=True):
            buffer.copy_(tensor, non_blocking=True)

    into_kept = timed(copy_into_kept, args.saves, device)
    into_fresh = timed(lambda: [t.detach().to("cpu", copy=True) for t in tensors], args.saves, device)
    with tempfile.TemporaryDirectory() as folder:
        plain = timed(lambda: torch.save(payload(), Path(folder) / "plain.pt"), args.saves, device)
        checkpointer = PeriodicCheckpointer(
            Path(folder) / "runner",
            payload,
            every_n_steps=1,
            every_n_epochs=None,
            keep_last=2,
            save_best=False,
        )
        writes = []
        for step in range(1, args.saves + 2):
            checkpointer.after_step(TrainState(step=step))
            started = time.perf_counter()
            checkpointer.wait()  # the loop's steps until the next save: the write ends meanwhile
            writes.append(time.perf_counter() - started)
        checkpointer.close()
    pauses = checkpointer.save_seconds
    copy = statistics.median(into_kept)
    rows = [
        ("one memory copy, into buffers kept", copy),
        ("one memory copy, into fresh buffers", statistics.median(into_fresh)),
        ("plain torch.save on the loop thread", statistics.median(plain)),
        ("runner's save, first (allocates its buffers)", pauses[0]),
        ("runner's save, after the first", statistics.median(pauses[1:])),
        ("  its write, on the thread", statistics.median(checkpointer.write_seconds[1:])),
    ]
    for name, seconds in rows:
        print(f"{name:46s} {seconds:7.3f} s  {seconds / copy:5.1f}x the copy into buffers kept")


if __name__ == "__main__":
    main()
