"""One training run, in named phases: the resume point (``resume.py``), the assembly of its parts
(``assembly.py``), its plan (``runplan.py``), and, once it writes, its records (``run_records.py``)
around the fit to the end (``finish.py``).

Hydra-free (see ``setup.py``): the command line composes the config and hands it over.
"""

from contextlib import nullcontext
from pathlib import Path
from typing import Any

from runner.checkpoint.locate import Found
from runner.checkpoint.policy import Checkpointer, NoCheckpoints
from runner.checkpoint.state import TrainState
from runner.config.schema import RunConfig
from runner.experiment.assembly import assemble, make_checkpointer
from runner.experiment.finish import Run, report_end, watch_of, with_resume_advice
from runner.experiment.lock import run_dir_lock
from runner.experiment.resume import NothingToTrain, checkpoint_to_resume, resume_point
from runner.experiment.run_records import RunRecords, check_record_places
from runner.experiment.runplan import run_plan
from runner.experiment.setup import Build
from runner.training.distributed import from_environment, process_group_of_one

__all__ = ["NothingToTrain", "checkpoint_to_resume", "train", "train_in_this_process"]  # the first two: moved


def train(
    config: RunConfig,
    run_dir: Path,
    build: Build,
    resume_from: Found | None = None,
    added_callbacks: dict[str, Any] | None = None,
) -> TrainState:
    """Run one experiment; return where it ended: its ``best_val`` is what sweepers optimise.

    ``resume_from``: a checkpoint already found and loaded. ``added_callbacks``: callbacks by name
    beside the config's (a search's, for its jobs). ``strategy=fsdp`` in a single process runs in a
    process group of one: sharded code and checkpoints are the same as on several processes."""
    with process_group_of_one() if config.strategy == "fsdp" else nullcontext():
        return train_in_this_process(config, run_dir, build, resume_from, added_callbacks)


def train_in_this_process(
    config: RunConfig,
    run_dir: Path,
    build: Build,
    resume_from: Found | None = None,
    added_callbacks: dict[str, Any] | None = None,
) -> TrainState:
    """Everything that can refuse the run does so before it writes: the places it records, the resume
    point, and the assembly (its first batch tried). Then, holding the run directory, the records open,
    the fit runs to the end, and the records end once, however the run ends."""
    process = from_environment()
    check_record_places(config, run_dir, process)
    start = resume_point(config, run_dir, resume_from, process)
    assembly = assemble(config, run_dir, build, start, process, added_callbacks)
    # Everything is built and loaded, and the data fits: from here on the run writes into its directory.
    plan = run_plan(assembly)
    records = RunRecords(assembly)
    checkpointer: Checkpointer = NoCheckpoints()
    try:
        with run_dir_lock(run_dir) if process.is_main else nullcontext():
            logger = records.open(plan)
            checkpointer = make_checkpointer(assembly, logger)
            logger.log_text("run/plan", plan)
            watch = watch_of(config, run_dir, assembly.speed, assembly.device, process, assembly.state)
            run = Run(assembly.learner, assembly.schedule, assembly.loaders, assembly.settings,
                      assembly.callbacks, logger, checkpointer, watch)  # fmt: skip
            state, last, stop = run.to_the_end(assembly.state, records.end)
            run.close()
            report_end(state, checkpointer, last, run_dir, process)
            if state.stopped_by_signal is not None:
                stop.exit_for(state.stopped_by_signal)
    except Exception as error:
        raised = with_resume_advice(error, checkpointer.last_written or start.path, run_dir)
        records.end(None, error=raised)
        if raised is not error:
            raise raised from error
        raise
    return state
