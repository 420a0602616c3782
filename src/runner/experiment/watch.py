"""What a run measures of itself: its time shares (every run), a profiler trace (``profile.steps``) and
what a compile cost (``compile``, ``compile_regional``), set up from the config and reported at the end.
"""

import logging
from dataclasses import dataclass, field
from pathlib import Path

import torch

from runner.checkpoint.state import TrainState
from runner.config.schema import RunConfig
from runner.experiment.profiling import StepProfiler
from runner.observe.writer import MetricLogger
from runner.training.compiling import DelayedCompile, compile_timing
from runner.training.distributed import ProcessInfo
from runner.training.speed import SpeedPlan
from runner.training.time_shares import StepTimes, summary

log = logging.getLogger("runner")
COMPILE_SECONDS = "vitals/compile_seconds"


@dataclass
class RunWatch:
    times: StepTimes = field(default_factory=StepTimes)
    profiler: StepProfiler | None = None
    compile: DelayedCompile | None = None

    def end(self, state: TrainState, logger: MetricLogger, num_workers: int | None) -> None:
        """The run's shares and advice, and what the compile cost, in the log (and the compile time in
        TensorBoard, at the last step)."""
        self.times.close()
        if sum(self.times.total.values()) > 0:
            log.info(summary(self.times.total, num_workers))
        if self.compile is not None and self.compile.compiled_after is not None:
            timing = compile_timing(self.times.step_compute, self.compile.compiled_after)
            if timing is not None:
                log.info(timing.line())
                logger.log_scalars(state.step, {COMPILE_SECONDS: timing.seconds})
                if slower := timing.slower():
                    log.warning(slower)

    def close(self) -> None:
        """However the run ends: a profile begun is written with the steps it has."""
        if self.profiler is not None:
            self.profiler.stop()


def watch_of(
    config: RunConfig,
    run_dir: Path,
    speed: SpeedPlan,
    device: torch.device,
    process: ProcessInfo,
    state: TrainState,
) -> RunWatch:
    """The run's watch; a profiler when ``profile.steps`` asks (``state``: the run's, whose steps a trace
    holds), the delayed compile when there is one."""
    watch = RunWatch(compile=speed.compile)
    if speed.compile is not None:
        watch.times.at_step.append(speed.compile)
    if config.profile.steps is not None:
        watch.profiler = StepProfiler(
            list(config.profile.steps), run_dir, device, config.profile.memory, watch.times.ranges, state,
            process.rank,
        )  # fmt: skip
        watch.times.at_step.append(watch.profiler)
    return watch
