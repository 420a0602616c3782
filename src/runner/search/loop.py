"""An Optuna search: each job's settings are proposed by an Optuna study, the jobs are started by the
sweep's launcher (``hydra_plugins.runner_optuna_sweeper`` hands Hydra's to it), and the study is told
how each ended from the ``result.json`` the job leaves (ok with its objective values, pruned, or
failed).

The study lives in storage (by default ``sqlite:///<sweep dir>/optuna.db``), so jobs in other
processes report to their trial (pruning, see ``trial.py``) and a sweep continues: run the same
command with the same ``hydra.sweep.dir`` and the jobs that finished are not run again, a job that was
interrupted runs again with its own settings (continuing from its ``last.pt``), and new trials are
proposed for the jobs not yet run. Each trial records its sweep directory and job number
(``runner_sweep_dir``, ``runner_job``): data that tells a job which trial is its own."""

import datetime
import logging
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import optuna
from omegaconf import DictConfig, OmegaConf

from runner.config.errors import ConfigError
from runner.config.trust import targets_in
from runner.observe.records import recorded_result
from runner.search import SEVERAL_PROCESSES, shared_by_processes, trials_not_run
from runner.search.claims import JobClaims
from runner.search.settings import (
    check_counts,
    directions_of,
    is_grid,
    objective_values,
    objectives_of,
    typed,
)
from runner.search.space import SearchSpace
from runner.search.storage import (
    existing_study,
    in_sweep_dir,
    open_checked_storage,
    storage_url,
    stored_study_exists,
    study_name_of,
)
from runner.search.study import (
    FIXED_ATTR,
    JOB_ATTR,
    SWEEP_ATTR,
    check_runners_trials,
    check_sampler_loads_no_pickle,
    quiet_optuna,
)
from runner.search.trials import (
    RESULTS_FILE,
    check_same_search,
    is_finished,
    job_dir,
    name_objectives,
    own_trials,
    tell_study,
    write_results,
)
from runner.search.workers import LATER, Job, Later, Launch, run_in_slots

# A sampler or pruner from its settings (``_target_`` and its arguments).
Build = Callable[[str, Any], Any]

log = logging.getLogger("runner")


class OptunaSearch:
    """The sweeper's work; ``hydra_plugins.runner_optuna_sweeper`` hands it the config, the search space
    read from Hydra's sweep syntax, a way to build a sampler or pruner and one to launch jobs."""

    def __init__(
        self, sampler: DictConfig, pruner: DictConfig | None = None, direction: Any = "minimize",
        objectives: Sequence[str] | None = None, storage: str | None = None, study_name: str | None = None,
        n_trials: int = 20, n_jobs: int = 1, max_failure_rate: float = 0.0,
        params: dict[str, str] | None = None,
    ) -> None:  # fmt: skip
        self.sampler_config, self.pruner_config = sampler, pruner
        self.direction, self.objectives_given = direction, objectives
        self.storage, self.study_name = storage, study_name
        self.n_trials, self.n_jobs, self.max_failure_rate = n_trials, n_jobs, max_failure_rate
        self.params = params

    def sweep(
        self, config: DictConfig, read_space: Callable[[], SearchSpace], build: Build, launch: Launch,
        parallel: bool,
    ) -> None:  # fmt: skip
        """Check everything, open (or continue) the study, then run the jobs not yet finished, up to
        ``n_jobs`` at a time, telling the study how each ended."""
        self.config, self.build, self.launch = config, build, launch
        # Jobs at once: a launcher that runs jobs in this process (parallel=False) runs one at a time.
        self.slots = self.n_jobs if parallel else 1
        quiet_optuna()
        self.directions = directions_of(self.direction)
        check_counts(self.n_trials, self.n_jobs, self.max_failure_rate)
        self.sampler_config = typed("hydra.sweeper.sampler", self.sampler_config)
        self.pruner_config = typed("hydra.sweeper.pruner", self.pruner_config)
        objectives = objectives_of(self.objectives_given, self.directions, self.config)
        space = read_space()  # the params, checked against the config
        if self.pruner_config is not None and len(self.directions) > 1:
            raise ConfigError("hydra.sweeper.pruner: Optuna prunes single-objective searches only; set "
                              "hydra.sweeper.pruner=null for several objectives")  # fmt: skip
        if self.pruner_config is not None:
            build("hydra.sweeper.pruner", self.pruner_config)  # a wrong setting is named now, not in a job
        if is_grid(self.sampler_config):
            self.n_trials = min(self.n_trials, math.prod(len(values) for values in space.grid().values()))
        sweep_dir = Path(self.config.hydra.sweep.dir).resolve()
        own_only = in_sweep_dir(self.storage)  # the study in the sweep directory is this sweep's alone
        study = self.open_study(sweep_dir, space, own_only)
        name_objectives(study, objectives)
        mine = own_trials(study, sweep_dir, own_only)
        done = sum(1 for number in range(self.n_trials) if is_finished(mine.get(number), sweep_dir, number))
        log.info(
            "Optuna search: %d trials (%s), study %s in %s, sampler %s, pruner %s%s", self.n_trials,
            ", ".join(f"{d} {o}" for d, o in zip(self.directions, objectives, strict=True)), study.study_name,
            storage_url(self.storage, sweep_dir), type(study.sampler).__name__,
            self.pruner_config.get("_target_", "?").rsplit(".", 1)[-1] if self.pruner_config else "none",
            f"; continuing: {done} done before" if done else "",
        )  # fmt: skip
        self.run_jobs(study, sweep_dir, space, objectives)
        write_results(sweep_dir / RESULTS_FILE, study, self.directions, objectives, sweep_dir, own_only)

    def open_study(self, sweep_dir: Path, space: SearchSpace, own_only: bool) -> optuna.Study:
        """The study, created or continued. What a storage already holds is checked against this search
        before anything is written; then the sweep directory and Hydra's record of the sweep."""
        url, name = storage_url(self.storage, sweep_dir), study_name_of(self.study_name)
        storage, earlier = None, None
        if not in_sweep_dir(self.storage) or stored_study_exists(url):
            storage = open_checked_storage(url)
            earlier = existing_study(storage, name)
            if earlier is not None:
                check_runners_trials(earlier, url)
                check_same_search(earlier, self.directions, space, sweep_dir, own_only)
        earlier_trials = len(earlier.get_trials(deepcopy=False)) if earlier is not None else 0
        sampler = self.make_sampler(space, earlier_trials)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        storage = storage or open_checked_storage(url)
        return optuna.create_study(
            storage=storage, study_name=name, directions=self.directions, load_if_exists=True, sampler=sampler
        )

    def run_jobs(
        self,
        study: optuna.Study,
        sweep_dir: Path,
        space: SearchSpace,
        objectives: list[str],
    ) -> None:
        """Jobs 0 .. n_trials-1 that have not finished, ``n_jobs`` at a time: the moment one ends, the
        study is told and the next job's trial is asked for and started. Other sweeper processes of the
        same search take jobs too (``claims``): a job another one runs is left alone, and waited for,
        so that one whose process dies is taken over. A job that ends without a result (stopped by a
        signal) ends the search, its trial left running for the same command to continue; so do more
        failures than ``max_failure_rate`` allows. Jobs running then end first."""
        claims = JobClaims(sweep_dir)
        started_at = datetime.datetime.now()
        numbers = iter(range(self.n_trials))
        elsewhere: list[int] = []  # jobs another process holds, tried again as slots free
        counts = {"failed": 0, "finished": 0, "started": 0}
        stopped: list[str] = []

        def job_to_run(number: int) -> Job | None:
            """Job ``number`` if this process claims it and it is to be run (read after the claim)."""
            if not claims.claim(number):
                if number not in elsewhere:
                    elsewhere.append(number)
                    self.warn_if_sqlite(sweep_dir)
                return None
            trial = own_trials(study, sweep_dir, own_only=in_sweep_dir(self.storage)).get(number)
            failed_in_this_search = (
                trial is not None and trial.state == optuna.trial.TrialState.FAIL
                and trial.datetime_complete is not None and trial.datetime_complete > started_at
            )  # fmt: skip
            if is_finished(trial, sweep_dir, number) or failed_in_this_search:
                if trial.state == optuna.trial.TrialState.RUNNING:
                    self.tell_if_untold(study, trial, job_dir(sweep_dir, number), objectives)
                claims.release(number)
                return None
            trial = self.trial_for(study, trial, sweep_dir, number, space)
            counts["started"] = max(counts["started"], number + 1)
            return Job(number, space.overrides(trial.params), trial)

        def next_job() -> Job | Later | None:
            if stopped:
                return None
            for number in numbers:
                if (job := job_to_run(number)) is not None:
                    return job
            for number in list(elsewhere):
                if claims.claim(number):
                    elsewhere.remove(number)
                    if (job := job_to_run(number)) is not None:
                        return job
            return LATER if elsewhere else None

        def ended(job: Job, failed_job: bool) -> None:
            outcome = self.tell(
                study, job.trial.number, failed_job, job_dir(sweep_dir, job.number), objectives
            )
            claims.release(job.number)
            if outcome == "interrupted":
                if not stopped and self.n_trials > counts["started"]:
                    trials_not_run.append(
                        f"{self.n_trials - counts['started']} more trial(s) of the search's {self.n_trials}"
                    )
                stopped.append(outcome)
                return
            counts["failed"] += outcome == "failed"
            counts["finished"] += 1
            failed, finished = counts["failed"], counts["finished"]
            if not stopped and failed / finished > self.max_failure_rate:
                stopped.append(outcome)
                log.error(
                    "the search stops: %d of %d trials failed, more than hydra.sweeper.max_failure_rate=%g "
                    "allows; see the failed jobs' train.log", failed, finished, self.max_failure_rate,
                )  # fmt: skip

        try:
            run_in_slots(self.slots, next_job, self.launch, ended)
        finally:
            claims.release_all()

    def warn_if_sqlite(self, sweep_dir: Path) -> None:
        """SQLite is not made for several processes writing at once (locking errors; damage on network
        filesystems, Optuna's FAQ): said once, in one line."""
        url = storage_url(self.storage, sweep_dir)
        if url.startswith("sqlite:") and not getattr(self, "warned", False):
            self.warned = True
            log.warning("another sweeper process runs jobs of this search on the SQLite study %s; %s", url,
                        SEVERAL_PROCESSES)  # fmt: skip

    def make_sampler(self, space: SearchSpace, earlier_trials: int) -> optuna.samplers.BaseSampler:
        """The configured sampler. A seeded one continuing a study is seeded ``seed + trials so far``:
        with its first seed it would propose again the points it began with. On a storage shared by
        several processes, each job's proposal is seeded ``seed + job number`` (``trial_for``): two
        processes started together would otherwise propose the same points."""
        config = OmegaConf.to_container(self.sampler_config, resolve=True)
        assert isinstance(config, dict)
        if config.get("seed") is not None and earlier_trials:
            config["seed"] = int(config["seed"]) + earlier_trials
        sampler = self.build("hydra.sweeper.sampler", config)
        if is_grid(self.sampler_config):
            sampler = sampler(space.grid())
        check_sampler_loads_no_pickle(sampler, [target for _, target in targets_in(config)])
        return sampler

    def trial_for(
        self, study: optuna.Study, earlier: Any, sweep_dir: Path, number: int, space: SearchSpace
    ) -> Any:
        """Job ``number``'s trial: the one it was interrupted in (its settings again), a new one with
        the settings of a failed attempt, or a new proposal."""
        if earlier is not None and earlier.state == optuna.trial.TrialState.RUNNING:
            return earlier
        attrs = {SWEEP_ATTR: str(sweep_dir), JOB_ATTR: number, FIXED_ATTR: space.fixed}
        if shared_by_processes(self.storage):  # seeded by job: processes started together differ
            study.sampler = self.make_sampler(space, number)
        if earlier is not None:  # failed before: the same settings, in a new trial
            study.enqueue_trial(earlier.params, user_attrs=attrs, skip_if_exists=False)
        trial = study.ask(space.distributions)
        if not space.holds(trial.params):  # Optuna hands out a waiting trial first, whoever stored it
            raise ConfigError(
                f"job {number}: the study {study.study_name} handed out trial {trial.number} with "
                f"{trial.params}, not settings of this search; give it another study_name or hydra.sweep.dir"
            )
        for key, value in attrs.items():
            trial.set_user_attr(key, value)
        return trial

    def tell(
        self,
        study: optuna.Study,
        trial_number: int,
        failed_job: bool,
        job_dir: Path,
        objectives: list[str],
    ) -> str:
        """Tell the study how job ended; returns ok, pruned, failed or interrupted (no result: stopped
        by a signal, its trial stays running so that the same command continues it)."""
        result = recorded_result(job_dir)
        status = result.get("status")
        if failed_job and status is None:
            status = "failed"
        if status == "ok":
            values = objective_values(result, objectives)
            if values is None:
                tell_study(study, trial_number, state=optuna.trial.TrialState.FAIL)
                return "failed"
            tell_study(study, trial_number, values=values)
            return "ok"
        if status == "pruned":
            tell_study(study, trial_number, state=optuna.trial.TrialState.PRUNED)
            return "pruned"
        if status == "failed":
            tell_study(study, trial_number, state=optuna.trial.TrialState.FAIL)
            return "failed"
        return "interrupted"

    def tell_if_untold(self, study: optuna.Study, trial: Any, job_dir: Path, objectives: list[str]) -> None:
        """A job that finished while its sweep was being stopped may not have been told yet."""
        if trial.state == optuna.trial.TrialState.RUNNING:
            self.tell(study, trial.number, False, job_dir, objectives)
