"""``profile.steps=[first,last]``: ``torch.profiler`` records those optimizer steps (CPU and, on CUDA,
GPU activity, with shapes and memory) into a Chrome/Perfetto trace in the run's ``profile/`` folder,
runner's phases named in it (``training/phases.py``). ``profile.memory=true`` on CUDA also writes a
memory snapshot of the same steps.

The memory snapshot uses ``torch.cuda.memory._record_memory_history`` and ``_dump_snapshot``: not
public names, but the ones PyTorch's own guide "Understanding CUDA Memory Usage" documents for it.
"""

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from runner.config.schema import ProfileConfig
from runner.training.phases import Ranges, recording

log = logging.getLogger("runner")
PROFILE_DIR = "profile"
OPEN_TRACE = "open it at https://ui.perfetto.dev (or chrome://tracing)"
OPEN_MEMORY = "open it at https://pytorch.org/memory_viz"


def trace_path(run_dir: Path, steps: list[int], rank: int = 0) -> Path:
    """``profile/steps_5-7.trace.json.gz`` (rank 0), ``profile/steps_5-7.rank1.trace.json.gz``."""
    process = f".rank{rank}" if rank else ""
    return run_dir / PROFILE_DIR / f"steps_{steps[0]}-{steps[1]}{process}.trace.json.gz"


def memory_path(trace: Path) -> Path:
    return trace.with_name(trace.name.replace(".trace.json.gz", ".memory.pickle"))


def profile_plan(profile: ProfileConfig, run_dir: Path, device: torch.device) -> str | None:
    """The run plan's row: what is recorded and where; None when nothing is."""
    if profile.steps is None:
        return None
    first, last = profile.steps
    text = f"optimizer steps {first}-{last} -> {trace_path(run_dir, profile.steps)}; {OPEN_TRACE}"
    if profile.memory:
        where = memory_path(trace_path(run_dir, profile.steps)) if device.type == "cuda" else None
        text += (
            f"; memory snapshot -> {where}" if where else "; profile.memory: CUDA only, off on this device"
        )
    return text


@dataclass
class StepProfiler:
    """Called at each step boundary with the steps done (``StepTimes.at_step``): starts before step
    ``first``, stops after step ``last`` (or at the run's end, with what it has)."""

    steps: list[int]
    run_dir: Path
    device: torch.device
    memory: bool
    ranges: Ranges
    rank: int = 0
    profiler: torch.profiler.profile | None = None
    done: bool = False

    def __call__(self, steps_done: int) -> None:
        first, last = self.steps
        if self.profiler is None and not self.done and first - 1 <= steps_done < last:
            self.start()
        elif self.profiler is not None and steps_done >= last:
            self.stop()

    def cuda(self) -> bool:
        return self.device.type == "cuda" and torch.cuda.is_available()

    def start(self) -> None:
        activities = [torch.profiler.ProfilerActivity.CPU]
        if self.cuda():
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self.profiler = torch.profiler.profile(
            activities=activities, record_shapes=True, profile_memory=True, with_stack=False
        )
        if self.memory and self.cuda():
            torch.cuda.memory._record_memory_history(max_entries=100_000)
        self.profiler.start()
        recording(True)

    def stop(self) -> None:
        """Ends the open range, stops, and writes the trace (to a temporary name first: a trace file is
        whole or absent)."""
        if self.profiler is None:
            return
        profiler, self.profiler, self.done = self.profiler, None, True
        self.ranges.close()
        recording(False)
        profiler.stop()
        path = trace_path(self.run_dir, self.steps, self.rank)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name.replace(".trace.json.gz", ".partial.trace.json.gz"))
        profiler.export_chrome_trace(str(partial))
        os.replace(partial, path)
        log.info("profile: steps %d-%d recorded in %s; %s", *self.steps, path, OPEN_TRACE)
        if self.memory and self.cuda():
            snapshot = memory_path(path)
            torch.cuda.memory._dump_snapshot(str(snapshot))
            torch.cuda.memory._record_memory_history(enabled=None)
            log.info("profile: memory snapshot in %s; %s", snapshot, OPEN_MEMORY)
