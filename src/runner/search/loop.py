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
from runner.search import trials_not_run
from runner.search.settings import (
    check_counts,
    directions_of,
    is_grid,
    objective_values,
    objectives_of,
    typed,
)
from runner.search.space import SearchSpace
from runner.search.storage import existing_study, open_checked_storage, storage_url, study_name_of
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

# Starts the jobs of a batch (numbers from the first one's, each its overrides) and waits for them;
# for each job, whether it failed without leaving a result.
Launch = Callable[[list[list[str]], int], list[bool]]
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
        self, config: DictConfig, read_space: Callable[[], SearchSpace], build: Build, launch: Launch
    ) -> None:
        """Check everything, open (or continue) the study, then run the jobs not yet finished, a batch
        of ``n_jobs`` at a time, telling the study how each ended."""
        self.config, self.build, self.launch = config, build, launch
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
        own_only = self.storage is None  # the study in the sweep directory is this sweep's alone
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
        self.run_jobs(study, mine, sweep_dir, space, objectives)
        write_results(sweep_dir / RESULTS_FILE, study, self.directions, objectives, sweep_dir, own_only)

    def open_study(self, sweep_dir: Path, space: SearchSpace, own_only: bool) -> optuna.Study:
        """The study, created or continued. What a storage already holds is checked against this search
        before anything is written; then the sweep directory and Hydra's record of the sweep."""
        url, name = storage_url(self.storage, sweep_dir), study_name_of(self.study_name)
        storage, earlier = None, None
        if self.storage is not None or (sweep_dir / "optuna.db").exists():
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
        mine: dict[int, Any],
        sweep_dir: Path,
        space: SearchSpace,
        objectives: list[str],
    ) -> None:
        """Jobs 0 .. n_trials-1 that have not finished, in batches of consecutive numbers. A job that
        ends without a result (stopped by a signal) ends the search, its trial left running for the
        same command to continue; so do more failures than ``max_failure_rate`` allows."""
        failed = finished = 0
        number = 0
        while number < self.n_trials:
            batch: list[tuple[int, Any]] = []  # (job number, trial)
            while number < self.n_trials and len(batch) < self.n_jobs:
                earlier_trial = mine.get(number)
                if is_finished(earlier_trial, sweep_dir, number):
                    self.tell_if_untold(study, earlier_trial, job_dir(sweep_dir, number), objectives)
                    number += 1
                    if batch:
                        break
                    continue
                batch.append((number, self.trial_for(study, earlier_trial, sweep_dir, number, space)))
                number += 1
            if not batch:
                continue
            overrides = [space.overrides(trial.params) for _, trial in batch]
            launched = self.launch(overrides, batch[0][0])
            outcomes = [
                self.tell(study, trial.number, failed_job, job_dir(sweep_dir, job), objectives)
                for (job, trial), failed_job in zip(batch, launched, strict=True)
            ]
            failed += outcomes.count("failed")
            finished += len(outcomes) - outcomes.count("interrupted")
            if "interrupted" in outcomes:
                if self.n_trials > number:
                    trials_not_run.append(
                        f"{self.n_trials - number} more trial(s) of the search's {self.n_trials}"
                    )
                break
            if finished and failed / finished > self.max_failure_rate:
                log.error(
                    "the search stops: %d of %d trials failed, more than hydra.sweeper.max_failure_rate=%g "
                    "allows; see the failed jobs' train.log", failed, finished, self.max_failure_rate,
                )  # fmt: skip
                break

    def make_sampler(self, space: SearchSpace, earlier_trials: int) -> optuna.samplers.BaseSampler:
        """The configured sampler. A seeded one continuing a study is seeded ``seed + trials so far``:
        with its first seed it would propose again the points it began with."""
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
