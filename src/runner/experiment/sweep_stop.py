"""A sweep that SIGTERM or SIGINT stops while its jobs run one after another in this process (Hydra's
basic launcher) or in worker processes (the joblib launcher): the running job saves and ends as
stopped, the jobs after it are not run, and the sweep says what was stopped. Hydra-free: the command
line hands over what its launcher does (``Job``)."""

import os
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from runner.observe.console import shown_path


def setting_key(override: str) -> str:
    """The key or config group a task override sets (``seed`` of ``seed=3``, ``model`` of
    ``+model@m=mlp``), as Hydra's ``Override.key_or_group`` names it: a job's task overrides are ones
    Hydra has already parsed, written back as given."""
    return override.split("=", 1)[0].lstrip("~+").split("@")[0]


def swept_in(overrides: list[str], keys: Any) -> list[str]:
    """Those of a job's ``overrides`` that set one of ``keys`` (what its sweep varies); all of them when
    none does."""
    varied = [override for override in overrides if setting_key(override) in keys]
    return varied or list(overrides)


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
        """Note job ``number`` (``overrides``: its task overrides) as not run."""
        self.not_run.append(f"{number} ({' '.join(swept_in(overrides, self.swept))})")

    def stops(self, error: SystemExit, sweep_dir: Path) -> bool:
        """Whether ``error`` is a job's exit for SIGTERM or SIGINT (then it is taken). Only for a sweep
        whose jobs run in this process or its workers: the caller says so."""
        from runner.training.distributed import in_submitit_job

        number = error.code - 128 if isinstance(error.code, int) else None
        if number not in (signal.SIGTERM, signal.SIGINT) or in_submitit_job():
            return False
        self.signal_number = number
        self.stopped_a_job = True
        self.sweep_dir = shown_path(sweep_dir)
        return True

    def watch(self) -> None:
        """From a sweep's first job in this process on: SIGTERM or SIGINT outside a job's training (a
        job starting, the sweeper proposing the next) stops the sweep as it does during one. A job that
        is starting stops at its first step boundary, no other starts; a second SIGINT aborts at once."""
        if self.previous_handlers:
            return
        for number in (signal.SIGTERM, signal.SIGINT):
            self.previous_handlers[number] = signal.signal(number, self.handle)

    def handle(self, number: int, frame: Any) -> None:
        from runner.training.signals import stop_before_start

        if self.signal_number == signal.SIGINT and number == signal.SIGINT:
            raise KeyboardInterrupt
        if self.signal_number is None:
            self.signal_number = number
            stop_before_start(number)
            name = signal.Signals(number).name
            message = f"runner: {name} received: the sweep stops; a starting job saves at its first step\n"
            os.write(2, message.encode())

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


# In a joblib worker: its jobs' SweepStop (each job gets its own copy of the task's), so that a worker a
# stopped sweep told runs none of its later jobs.
WORKER_SWEEP_STOP = SweepStop()
