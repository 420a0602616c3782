"""``profile.steps=[first,last]``: ``torch.profiler`` records those optimizer steps (CPU and, on CUDA,
GPU activity, with shapes and memory) into a Chrome/Perfetto trace in the run's ``profile/`` folder,
runner's phases named in it (``training/phases.py``). ``profile.memory=true`` on CUDA also writes a
memory snapshot of the same steps.

A trace is named by the steps it holds: a run stopped inside the range keeps the steps it recorded,
and its resume records the rest into a trace of its own. A trace is written whole or not at all, never
over another file and never through a link: into a folder made for the write, then linked to a name
nothing holds. A write the disk refuses loses that trace only, said in one line; the run goes on.

The memory snapshot uses ``torch.cuda.memory._record_memory_history`` and ``_dump_snapshot``: not
public names, but the ones PyTorch's own guide "Understanding CUDA Memory Usage" documents for it.
"""

import logging
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from runner.checkpoint.durable import WriteError, writing
from runner.checkpoint.state import TrainState
from runner.config.errors import ConfigError, show
from runner.config.schema import ProfileConfig
from runner.training.phases import Ranges, recording

log = logging.getLogger("runner")
PROFILE_DIR = "profile"
OPEN_TRACE = "open it at https://ui.perfetto.dev (or chrome://tracing)"
OPEN_MEMORY = "open it at https://pytorch.org/memory_viz"


def trace_path(run_dir: Path, steps: list[int], rank: int = 0, take: int = 1) -> Path:
    """``profile/steps_5-7.trace.json.gz`` (rank 0), ``profile/steps_5-7.rank1.trace.json.gz``; the
    same steps recorded again (a run resumed from before them): ``steps_5-7.take2.trace.json.gz``."""
    process = f".rank{rank}" if rank else ""
    again = f".take{take}" if take > 1 else ""
    return run_dir / PROFILE_DIR / f"steps_{steps[0]}-{steps[1]}{process}{again}.trace.json.gz"


def memory_path(trace: Path) -> Path:
    return trace.with_name(trace.name.replace(".trace.json.gz", ".memory.pickle"))


def linked_as_new(made: Path, names: Callable[[int], Path]) -> Path:
    """``made`` under the first of ``names(1)``, ``names(2)``, ... that nothing holds: a hard link is
    made only where no file or link is, so it neither replaces one nor writes through one."""
    take = 1
    while True:
        try:
            os.link(made, names(take))
            return names(take)
        except FileExistsError:
            take += 1


def recorded_steps(profile: ProfileConfig, total_steps: int, start_step: int) -> list[int] | None:
    """The steps of ``profile.steps`` this run takes (after ``start_step``, up to ``total_steps``),
    which its trace is named by; None when it takes none of them."""
    first, last = max(profile.steps[0], start_step + 1), min(profile.steps[1], total_steps)
    return [first, last] if first <= last else None


def check_profile(profile: ProfileConfig, run_dir: Path, total_steps: int, start_step: int) -> None:
    """Before anything is written: a new run whose ``profile.steps`` begin past its last planned step
    would record nothing (a resume past them says so in its plan), and the traces' folder must be a
    folder of the run's, not a file or a link."""
    if profile.steps is None:
        return
    key = f"profile.steps={show(list(profile.steps))}"
    if start_step == 0 and recorded_steps(profile, total_steps, start_step) is None:
        raise ConfigError(
            f"{key}: the run plans {total_steps:,} optimizer steps, so step {profile.steps[0]} is past its "
            f"end and nothing would be recorded; profile.steps must be [first, last] with 1 <= first <= "
            f"{total_steps:,}"
        )
    folder = run_dir / PROFILE_DIR
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        what = "a link" if folder.is_symlink() else "a file"
        raise ConfigError(
            f"{key}: {folder}, where the run's traces go, is {what}, not a folder; move it away, or "
            "give the run another folder (hydra.run.dir)"
        )


def profile_plan(
    profile: ProfileConfig, run_dir: Path, device: torch.device, total_steps: int, start_step: int = 0
) -> str | None:
    """The run plan's row: what is recorded and where (the steps of ``profile.steps`` this run takes,
    the name its trace gets); None when nothing is asked."""
    if profile.steps is None:
        return None
    first, last = profile.steps
    steps = recorded_steps(profile, total_steps, start_step)
    outside = f"this run's steps {start_step + 1}-{total_steps}"
    if steps is None:
        return f"optimizer steps {first}-{last}: none of them is among {outside}, nothing is recorded"
    take = 1  # the name the trace will take: the first that nothing holds (linked_as_new)
    while os.path.lexists(trace_path(run_dir, steps, take=take)):
        take += 1
    trace = trace_path(run_dir, steps, take=take)
    text = (
        f"optimizer steps {steps[0]}-{steps[1]} -> {trace}; {OPEN_TRACE}; a run stopped inside them keeps "
        "the steps it recorded, named by them (steps_<first>-<last>)"
    )
    if steps != [first, last]:
        text += f"; of profile.steps={first}-{last}, the others are not among {outside}"
    if profile.memory:
        where = memory_path(trace) if device.type == "cuda" else None
        text += (
            f"; memory snapshot -> {where}" if where else "; profile.memory: CUDA only, off on this device"
        )
    return text


@dataclass
class StepProfiler:
    """Called at each step boundary with the steps done (``StepTimes.at_step``): starts before step
    ``first`` (or the first step of a run resumed inside the range), stops after step ``last`` (or at
    the run's end, with the steps ``state`` has done by then)."""

    steps: list[int]
    run_dir: Path
    device: torch.device
    memory: bool
    ranges: Ranges
    state: TrainState
    rank: int = 0
    profiler: torch.profiler.profile | None = None
    started_after: int = 0  # the steps done when it started
    done: bool = False

    def __call__(self, steps_done: int) -> None:
        first, last = self.steps
        if self.profiler is None and not self.done and first - 1 <= steps_done < last:
            self.start(steps_done)
        elif self.profiler is not None and steps_done >= last:
            self.stop()

    def cuda(self) -> bool:
        return self.device.type == "cuda" and torch.cuda.is_available()

    def start(self, steps_done: int) -> None:
        activities = [torch.profiler.ProfilerActivity.CPU]
        if self.cuda():
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self.profiler = torch.profiler.profile(
            activities=activities, record_shapes=True, profile_memory=True, with_stack=False
        )
        if self.memory and self.cuda():
            torch.cuda.memory._record_memory_history(max_entries=100_000)
        self.started_after = steps_done
        self.profiler.start()
        recording(True)

    def stop(self) -> None:
        """Ends the open range, stops, and writes the trace of the steps it holds."""
        if self.profiler is None:
            return
        profiler, self.profiler, self.done = self.profiler, None, True
        self.ranges.close()
        recording(False)
        profiler.stop()
        held = [self.started_after + 1, max(self.started_after + 1, self.state.step)]
        snapshot = self.memory and self.cuda()
        folder = self.run_dir / PROFILE_DIR
        try:
            with writing(trace_path(self.run_dir, held, self.rank)):
                folder.mkdir(parents=True, exist_ok=True)
                with tempfile.TemporaryDirectory(prefix=".writing-", dir=folder) as scratch:
                    made = Path(scratch, "trace.json.gz")
                    # Streamed by torch's Python writer into the gzip file: a refused write raises here
                    # (torch's C++ writer only logs it).
                    profiler.export_chrome_trace(str(made), use_python_export=True)
                    path = linked_as_new(made, lambda take: trace_path(self.run_dir, held, self.rank, take))
                    log.info("profile: steps %d-%d recorded in %s; %s", *held, path, OPEN_TRACE)
                    if snapshot:
                        torch.cuda.memory._dump_snapshot(str(Path(scratch, "memory.pickle")))
                        kept = linked_as_new(Path(scratch, "memory.pickle"), lambda take: memory_path(
                            trace_path(self.run_dir, held, self.rank, take)
                        ))  # fmt: skip
                        log.info("profile: memory snapshot in %s; %s", kept, OPEN_MEMORY)
        except (WriteError, OSError) as error:  # a refused write, or a file put where the folder was
            log.warning("profile: the trace of steps %d-%d is not kept: %s; the run goes on", *held, error)
        finally:
            if snapshot:
                torch.cuda.memory._record_memory_history(enabled=None)
