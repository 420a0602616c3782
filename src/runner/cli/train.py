"""``python -m runner train [overrides]``: check the command line, rewrite it for a resume or for
torchrun, then run (or sweep) under Hydra."""

import logging
import math
import os
import signal
import sys
import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from runner.cli import worker_stop
from runner.cli.arguments import CommandLine, for_rank, parse_overrides, reapplied, resumed, value_text
from runner.cli.exits import exit_with
from runner.cli.fresh_run_dir import check_new_run_dir, refuse_existing_run
from runner.cli.hydra_app import check_command_line, options_of, run_hydra, trusted_targets
from runner.cli.submitit_tasks import submitit_tasks_as_ranks
from runner.cli.undo import RunDirBefore, remove_new_run_dir
from runner.config.errors import ConfigError, UserError
from runner.config.schema import PEER_TIMEOUT_S
from runner.config.trust import (
    check_config_from_file,
    check_named,
    interpolations_in,
    is_live_interpolation,
    one_line,
    targets_in,
)
from runner.config.typed import as_dict, typed_config
from runner.observe.console import (
    IN_LOG_FILE_ONLY,
    job_ended,
    job_started,
    on_console_only,
    shown_path,
    sweep_job_console,
)

if TYPE_CHECKING:  # importing it loads torch: the run does that only once Hydra has composed
    from runner.checkpoint.locate import Found

log = logging.getLogger("runner")
SWEEP_PLUGIN_GROUPS = ("hydra/launcher", "hydra/sweeper", "hparams_search")


def with_resume(command_line: CommandLine, trusted: set[str]) -> tuple[CommandLine, "Found | None"]:
    """The command line that continues the run ``resume=`` names, and its checkpoint, found and
    loaded here once. ``resume=auto`` looks in the run's own directory, once Hydra has made it.
    ``trusted``: the targets this command line names."""
    request = command_line.last("resume")
    if request is None or value_text(request) in ("auto", "null"):
        return command_line, None
    from runner.checkpoint.locate import locate_checkpoint, original_overrides

    found = locate_checkpoint(value_text(request), Path.cwd() / "outputs")
    check_writable(found.run_dir, value_text(request))
    original = original_overrides(found.run_dir)
    check_stored_overrides(original, command_line, found.run_dir, trusted)
    stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
    found = replace(found, reapplied=tuple(reapplied(command_line, original)))
    return resumed(command_line, str(found.path), str(found.run_dir), original, stamp), found


def check_writable(run_dir: Path, request: str) -> None:
    """A resume writes into the run directory (checkpoints, events, its log and Hydra's record): a
    read-only one is refused before Hydra tries to open the log file there."""
    places = [run_dir, *(run_dir / name for name in (".hydra", "checkpoints", "train.log", "run.yaml"))]
    read_only = next((path for path in places if path.exists() and not os.access(path, os.W_OK)), None)
    if read_only is not None:
        raise ConfigError(
            f"resume={request}: {read_only} is read-only, and a resume writes its checkpoints and logs into "
            f"the run directory; make it writable (chmod -R u+w {run_dir}) or resume a copy of the run"
        )


def check_stored_overrides(
    original: list[str], command_line: CommandLine, run_dir: Path, trusted: set[str]
) -> None:
    """A run directory's record of its command line is data: what it would make runner import or
    call (a ``_target_``, a config folder, a config file outside the config folders, Hydra's own
    settings) is refused unless this command line names it. The overrides given now replace theirs."""
    record = run_dir / ".hydra" / "overrides.yaml"
    given = set(command_line.keys())
    stored = [override for override in parse_overrides(original) if override.key_or_group not in given]
    named = []
    for override in stored:
        key, value = override.key_or_group.lstrip("+~"), override.value()
        if key == "hydra.searchpath":
            raise ConfigError(
                f"resume={run_dir}: the run was started with {override.input_line}; runner takes no config "
                "folders from a run directory: give it again on this command line"
            )
        # A config group's options: only those of the config folders this command line names (Hydra
        # would load any YAML file a path names, ``model=../../x`` or in a list).
        group = key.split("@")[0]
        options = options_of(group, command_line) if "." not in group else []
        chosen = value if isinstance(value, list) else [value]
        unknown_option = bool(options) and any(not isinstance(o, str) or o not in options for o in chosen)
        selects_file = "." not in key and any(
            isinstance(o, str) and (".." in o or o.startswith("/")) for o in chosen
        )
        # A package puts an option anywhere, Hydra's own settings too (``+scheduler@hydra.callbacks.x=``:
        # Hydra builds its callbacks before runner sees the config).
        package = (override.package or "").removeprefix("_global_").lstrip(".")
        if key.startswith("hydra") or package.startswith("hydra") or unknown_option or selects_file:
            raise ConfigError(
                f"resume={run_dir}: {record} holds {override.input_line}, which runner does not re-apply "
                "from a run directory (it names Hydra settings or a config file outside the config "
                "folders); give it on this command line if you mean it"
            )
        live = [(inner, text) for inner, text in interpolations_in(value, key) if is_live_interpolation(text)]
        if live:  # an escaped one (\${...}) is a plain string here: check_config_from_file sees it built
            raise ConfigError(
                f"resume={run_dir}: {record} holds {one_line(override.input_line)}, an interpolation, which "
                "runner does not resolve from a run directory (it may read this machine's environment or "
                "grow without bound); give it on this command line if you mean it"
            )
        named += [(key, str(value))] if key.endswith("_target_") else list(targets_in(value, key))
    check_named(named, trusted, f"resume={run_dir}: {record}",
                "give {first} on this command line")  # fmt: skip


def under_torchrun(command_line: CommandLine) -> CommandLine:
    """Start the process group and give every rank rank 0's directory. A sweep runs its jobs one after
    another, each on every rank, with Hydra's basic launcher and sweeper."""
    from runner.training.distributed import shared_run_dir, start_process_group

    if command_line.sweep:
        for override in command_line.overrides:
            if override.key_or_group.lstrip("+~") in SWEEP_PLUGIN_GROUPS:
                raise ConfigError(
                    f"{override.input_line}: under torchrun a sweep runs each job on every rank, one job "
                    "after another (Hydra's basic launcher and sweeper); for parallel or Optuna sweeps of "
                    "multi-process jobs, use a submitit launcher with hydra.launcher.tasks_per_node instead "
                    "of torchrun"
                )
    timeout = command_line.last("peer_timeout_s")
    start_process_group(PEER_TIMEOUT_S if timeout is None else timeout.value())
    given = command_line.last("hydra.sweep.dir" if command_line.sweep else "hydra.run.dir")
    parent = "outputs/multirun" if command_line.sweep else "outputs"
    run_dir = shared_run_dir(value_text(given) if given else None, parent)
    return for_rank(command_line, run_dir, int(os.environ["RANK"]))


@dataclass
class SweepStop:
    """A sweep run in this process (Hydra's basic launcher) that a signal stopped: the running job
    saves and ends, the jobs after it are not run, the summary covers what ran."""

    swept: list[str] = field(default_factory=list)  # the keys the command line sweeps, naming a job
    signal_number: int | None = None
    not_run: list[str] = field(default_factory=list)
    sweep_dir: str = ""
    previous_handlers: dict[int, Any] = field(default_factory=dict)
    stopped_a_job: bool = False

    def skip(self, number: int, overrides: list[str]) -> None:
        varied = [o.input_line for o in parse_overrides(overrides) if o.key_or_group in self.swept]
        self.not_run.append(f"{number} ({' '.join(varied or overrides)})")

    def stops(self, error: SystemExit, hydra_config: Any) -> bool:
        """Whether ``error`` is a job's exit for SIGTERM or SIGINT in such a sweep (then it is taken)."""
        from runner.training.distributed import in_submitit_job

        number = error.code - 128 if isinstance(error.code, int) else None
        if (
            number not in (signal.SIGTERM, signal.SIGINT)
            or not (jobs_in_this_process(hydra_config) or jobs_in_workers(hydra_config))
            or in_submitit_job()
        ):
            return False
        self.signal_number = number
        self.stopped_a_job = True
        self.sweep_dir = shown_path(Path(hydra_config.sweep.dir))
        return True

    def watch(self) -> None:
        """From a sweep's first job in this process on: SIGTERM or SIGINT outside a job's training (a
        job starting, the sweeper proposing the next) stops the sweep as it does during one. A job that
        is starting stops at its first step boundary, no other starts; a second SIGINT aborts at once."""
        if self.previous_handlers:
            return
        from runner.training.signals import stop_before_start

        def handle(number: int, frame: Any) -> None:
            if self.signal_number == signal.SIGINT and number == signal.SIGINT:
                raise KeyboardInterrupt
            if self.signal_number is None:
                self.signal_number = number
                stop_before_start(number)
                name = signal.Signals(number).name
                message = (
                    f"runner: {name} received: the sweep stops; a starting job saves at its first step\n"
                )
                os.write(2, message.encode())

        for number in (signal.SIGTERM, signal.SIGINT):
            self.previous_handlers[number] = signal.signal(number, handle)

    def unwatch(self) -> None:
        for number, handler in self.previous_handlers.items():
            signal.signal(number, handler)
        self.previous_handlers.clear()

    def report(self, exit_code: Any = None) -> NoReturn:
        """Say what the signal stopped. One that came after the last job had ended stopped nothing:
        the sweep finished, and exits as it would have (``exit_code``: its summary's, 1 if a job failed)."""
        from runner.search import trials_not_run

        name = signal.Signals(self.signal_number).name
        if not (self.stopped_a_job or self.not_run or trials_not_run):
            print(f"runner: {name} received after the last job had ended: the sweep finished; the summary "
                  "covers every job", file=sys.stderr)  # fmt: skip
            raise SystemExit(exit_code or 0)
        not_run = "; ".join([*self.not_run, *trials_not_run]) or "none"
        print(f"runner: the sweep was stopped by {name}: the running job saved its checkpoint; jobs not run: "
              f"{not_run}; the summary covers the jobs that ran; to continue the sweep, run the same command "
              f"with hydra.sweep.dir={self.sweep_dir}", file=sys.stderr)  # fmt: skip
        raise SystemExit(128 + self.signal_number)


def stopped_workers_report() -> NoReturn:
    """How a sweep whose jobs ran in worker processes ended when a signal stopped it."""
    from runner.search import trials_not_run

    number = worker_stop.received[0]
    not_run = "; ".join(["jobs not started", *trials_not_run])
    print(f"runner: the sweep was stopped by {signal.Signals(number).name}: the running jobs saved their "
          f"checkpoints; not run: {not_run}; the summary covers the jobs that ran; to continue the sweep, "
          f"run the same command with hydra.sweep.dir={shown_path(worker_stop.sweep_dir[0])}",
          file=sys.stderr)  # fmt: skip
    raise SystemExit(128 + number)


def jobs_in_this_process(hydra_config: Any) -> bool:
    """Whether the sweep's launcher runs its jobs one after another in this process (Hydra's basic
    launcher): then a job may draw a progress bar."""
    return "BasicLauncher" in str(hydra_config.launcher.get("_target_", ""))


def jobs_in_workers(hydra_config: Any) -> bool:
    """Whether the sweep's jobs run in worker processes of the sweep process (the joblib launcher)."""
    return "JoblibLauncher" in str(hydra_config.launcher.get("_target_", ""))


# In a joblib worker: its jobs' SweepStop (each job gets its own copy of the task's), so that a worker a
# stopped sweep told runs none of its later jobs.
WORKER_SWEEP_STOP = SweepStop()


def swept_overrides(task_overrides: list[str], swept: list[str], sweeper: Any) -> str:
    """A sweep job's overrides as its console lines name the job: those the sweep varies (the command
    line's swept keys, a sweeper's ``params``); all of them when none is known."""
    keys = {*swept, *(sweeper.get("params") or {})}
    varied = [o.input_line for o in parse_overrides(task_overrides) if o.key_or_group in keys]
    return " ".join(varied or task_overrides) or "(no overrides)"


def train_task(
    cfg: DictConfig, found: "Found | None" = None, before: RunDirBefore | None = None,
    sweep_stop: SweepStop | None = None, trusted: set[str] | None = None,
    before_jobs: dict[Path, RunDirBefore] | None = None,
) -> float | None:  # fmt: skip
    """One run, or one job of a sweep. A failed sweep job records its failure (traceback in its log,
    ``result.json``) and returns NaN, so the other jobs and the sweep's summary still run. A run
    refused at its start leaves nothing behind: no new run directory, a resumed one as it was."""
    from runner.checkpoint.durable import WriteError
    from runner.experiment.train import NothingToTrain, train
    from runner.observe.records import RESULT_FILE, write_result
    from runner.search.continuation import OtherJobInTheWay, earlier_job

    hydra_config = HydraConfig.get()
    run_dir = Path(hydra_config.runtime.output_dir)
    in_sweep = hydra_config.mode == RunMode.MULTIRUN
    # As written: an override may hold an interpolation that typed_config() names if it fails.
    task_overrides = OmegaConf.to_container(hydra_config.overrides.task, resolve=False)
    started = time.time()
    in_worker = in_sweep and jobs_in_workers(hydra_config)
    if in_worker:
        WORKER_SWEEP_STOP.swept = sweep_stop.swept if sweep_stop else []
        sweep_stop = WORKER_SWEEP_STOP
    sweep_stop = sweep_stop or SweepStop()
    one_process = int(os.environ.get("WORLD_SIZE", 1)) == 1
    if in_sweep and (jobs_in_this_process(hydra_config) or in_worker) and one_process:
        sweep_stop.watch()
    if in_sweep and sweep_stop.signal_number is not None:
        sweep_stop.skip(hydra_config.job.num, task_overrides)
        restore_hydra_record(run_dir, before_jobs)  # a job an earlier run of the sweep started
        remove_new_run_dir(run_dir, keep=run_dir.parent)
        return math.nan

    def record(status: str, **details: Any) -> None:
        # Rank 0 alone: ranks that fail at the same step would otherwise write one file at once.
        if int(os.environ.get("RANK", 0)) == 0:
            try:
                write_result(run_dir, status, time.time() - started, **details)
            except WriteError as error:  # the run's outcome is already said; the record is extra
                log.warning("could not record the result: %s", error)

    def undo_hydra_writes() -> None:
        """For a run refused before it wrote anything of its own."""
        if int(os.environ.get("RANK", 0)) != 0:
            return  # rank 0 alone: it wrote Hydra's record
        if before is not None and before.run_dir == run_dir.resolve():
            if before.untouched():
                before.restore()
        else:
            remove_new_run_dir(run_dir, keep=Path.cwd())

    def finish(best: float | None) -> float | None:
        """Record how the run ended: ok, or pruned by its search (with the search's objective values)."""
        value = "n/a (no finite value)" if best is None else f"{best:.4g}"
        if search is None:
            record("ok", best=best)
        else:
            monitor = config.checkpoint.monitor
            objectives = {**search.objectives(objectives_of_job(hydra_config.sweeper, config)), monitor: best}
            if search.pruned_at is not None:
                record("pruned", best=best, pruned_at_step=search.pruned_at, objectives=objectives)
                job_ended(
                    "pruned", time.time() - started, f"at step {search.pruned_at}; best {monitor} {value}"
                )
                return best
            record("ok", best=best, objectives=objectives)
        if in_sweep:
            job_ended("ok", time.time() - started, f"best {config.checkpoint.monitor} {value}")
        return best

    console = (
        sweep_job_console(hydra_config.job.num, jobs_in_this_process(hydra_config)) if in_sweep else None
    )
    search = None
    continuing = None
    with console or nullcontext(), submitit_tasks_as_ranks(run_dir):
        try:
            config = typed_config(cfg)
            if not in_sweep and config.resume is None:  # a run directory a config file names
                refuse_existing_run(run_dir, f"hydra.run.dir={run_dir}")
            if found is not None and trusted is not None:  # built from a run directory's record too
                check_config_from_file(
                    as_dict(config), trusted,
                    f"resume={found.run_dir}: the config composed with {found.run_dir / '.hydra'}",
                    "give {first} on this command line",
                )  # fmt: skip
            earlier = earlier_job(run_dir, as_dict(config)) if in_sweep and config.resume is None else None
            if earlier is not None and earlier.finished:
                restore_hydra_record(run_dir, before_jobs)
                value = earlier.result.get("best")
                shown = "n/a" if not isinstance(value, (int, float)) else f"{value:.4g}"
                on_console_only(logging.INFO, f"{earlier.result['status']} in an earlier run of this sweep "
                                f"(best {config.checkpoint.monitor} {shown}): not run again")  # fmt: skip
                return value
            continuing = earlier.checkpoint if earlier is not None else None
            if in_sweep:
                step = f" (continuing from step {continuing.checkpoint['global_step']})" if continuing else ""
                job_started(swept_overrides(task_overrides, sweep_stop.swept, hydra_config.sweeper) + step)
            if in_sweep and is_runner_search(hydra_config.sweeper):
                search = search_trial(config, hydra_config, run_dir)
            given = found if found is not None and config.resume == str(found.path) else continuing
            if earlier is not None:  # the result of a failed attempt; this one records its own
                (run_dir / RESULT_FILE).unlink(missing_ok=True)
            with gpu_of_parallel_job(config.device, hydra_config) if in_sweep else nullcontext():
                best = train(config, run_dir, build=hydra.utils.instantiate, resume_from=given,
                             added_callbacks={"search": search} if search else None)  # fmt: skip
        except SystemExit as error:
            if in_sweep and sweep_stop.stops(error, hydra_config):
                stopped_by = signal.Signals(sweep_stop.signal_number).name
                job_ended("stopped", time.time() - started, f"by {stopped_by}", logging.WARNING)
                return math.nan
            raise
        except OtherJobInTheWay as error:
            restore_hydra_record(run_dir, before_jobs)
            exit_with(error)
        except NothingToTrain as done:
            if in_sweep and continuing is not None:  # it ended, and was stopped before it said so
                restore_hydra_record(run_dir, before_jobs)
                if search is not None:
                    search.load_state_dict(continuing.checkpoint["callbacks_state_dict"].get("search", {}))
                return finish(continuing.checkpoint.get("best_val"))
            undo_hydra_writes()
            if in_sweep:
                job_ended("skipped", time.time() - started, str(done))
            else:
                print(f"runner: {done}", file=sys.stderr)
            return None
        except UserError as error:
            if not in_sweep:
                undo_hydra_writes()
                exit_with(error)
            record("failed", error=str(error))
            job_ended("failed", time.time() - started, str(error), logging.ERROR)
            return math.nan
        except Exception as error:
            record("failed", error=f"{type(error).__name__}: {error}")
            if not in_sweep:
                raise
            log.exception("job failed", extra=IN_LOG_FILE_ONLY)  # the end line names the error
            log_file = shown_path(run_dir / f"{hydra_config.job.name}.log")
            summary = f"{type(error).__name__}: {error}".splitlines()[0]
            job_ended("failed", time.time() - started, f"{summary} (traceback in {log_file})", logging.ERROR)
            return math.nan
        return finish(best)


def gpu_of_parallel_job(device: str, hydra_config: Any) -> AbstractContextManager[Any]:
    """A job of a sweep whose jobs run at the same time on this machine (the joblib launcher) takes a
    GPU no other running job holds, when there are several and the job asks for CUDA (``device=auto``
    or ``cuda``). Not under torchrun (each rank has its own) nor in a submitit job (the scheduler
    gives each job its GPUs)."""
    from runner.training.distributed import in_submitit_job

    alone = (
        jobs_in_this_process(hydra_config) or in_submitit_job() or int(os.environ.get("WORLD_SIZE", 1)) > 1
    )
    if alone or device not in ("auto", "cuda"):
        return nullcontext()
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count < 2:
        return nullcontext()
    from runner.search.gpus import claimed_gpu

    return claimed_gpu(Path(hydra_config.sweep.dir), count, hydra_config.job.num, torch.cuda.set_device)


def is_runner_search(sweeper: Any) -> bool:
    """Whether the sweep is runner's Optuna search (its jobs report to their trials)."""
    from hydra_plugins.runner_optuna_sweeper.config import SWEEPER_TARGET

    return sweeper.get("_target_") == SWEEPER_TARGET


def objectives_of_job(sweeper: Any, config: Any) -> list[str]:
    return [str(name) for name in sweeper.get("objectives") or [config.checkpoint.monitor]]


def search_trial(config: Any, hydra_config: Any, run_dir: Path) -> Any:
    """The callback that gives a search job its objective values and, with a pruner, reports to its
    trial after every validation."""
    from runner.search.trial import SearchTrial, link_to_trial

    sweeper = hydra_config.sweeper
    link = None
    if sweeper.get("pruner"):
        pruner = hydra.utils.instantiate(sweeper.pruner)
        link = link_to_trial(sweeper, pruner, Path(hydra_config.sweep.dir), hydra_config.job.num)
    samples_per_step = None  # it validates at epoch ends: reported at the epochs done
    if config.trainer.val_every_n_steps is not None:
        samples_per_step = config.data.batch_size * config.accumulate * int(os.environ.get("WORLD_SIZE", 1))
    objectives = tuple(objectives_of_job(sweeper, config))
    return SearchTrial(config.checkpoint.monitor, config.checkpoint.mode, link, samples_per_step, objectives)


def restore_hydra_record(run_dir: Path, before_jobs: dict[Path, RunDirBefore] | None) -> None:
    """A job that is not run leaves its directory as it was: Hydra's record of it too."""
    before = (before_jobs or {}).get(run_dir.resolve())
    if before is not None and int(os.environ.get("RANK", 0)) == 0:
        before.restore()


def jobs_before(command_line: CommandLine) -> dict[Path, RunDirBefore]:
    """The job directories of the sweep directory the command line names, as they are before Hydra
    writes its record of each job into them (a job that is not run again gets its own back)."""
    named = command_line.last("hydra.sweep.dir")
    if not command_line.sweep or named is None:
        return {}
    sweep_dir = Path(value_text(named))
    if not sweep_dir.is_dir():
        return {}
    return {
        path.resolve(): RunDirBefore.of(path) for path in sweep_dir.iterdir() if (path / ".hydra").is_dir()
    }


def main_train(arguments: list[str]) -> None:
    distributed = int(os.environ.get("WORLD_SIZE", 1)) > 1
    try:
        command_line = CommandLine.parse(arguments)
        check_command_line(command_line)
        # What this command line names, before a run directory's record is added to it (a resume's).
        trusted = trusted_targets(command_line) if command_line.last("resume") is not None else set()
        command_line, found = with_resume(command_line, trusted)
        if distributed:
            command_line = under_torchrun(command_line)
        check_new_run_dir(command_line)
        # A directory the command line names may exist (a resume's, one a scheduler reruns in): a
        # refused run leaves it as it was.
        named_dir = command_line.last("hydra.run.dir")
        named = None if command_line.sweep or named_dir is None else Path(str(named_dir.value()))
        before = RunDirBefore.of(named) if named is not None else None
        before_jobs = jobs_before(command_line)
    except UserError as error:
        if distributed:  # every rank refuses alike, each in one line
            from runner.training.distributed import stop_process_group

            stop_process_group()
        exit_with(error)
    sweep_stop = SweepStop([o.key_or_group for o in command_line.overrides if o.is_sweep_override()])
    exit_code = None
    try:
        run_hydra(lambda cfg: train_task(cfg, found, before, sweep_stop, trusted, before_jobs), command_line)
    except SystemExit as error:
        if sweep_stop.signal_number is None and not worker_stop.received:
            raise
        exit_code = error.code
    finally:
        sweep_stop.unwatch()
        worker_stop.unwatch()
        if distributed:
            from runner.training.distributed import stop_process_group

            stop_process_group()
    if sweep_stop.signal_number is not None:
        sweep_stop.report(exit_code)
    if worker_stop.received:
        stopped_workers_report()
