"""An Optuna search as a Hydra sweep: each job's settings are proposed by an Optuna study, the jobs are
launched by Hydra's launcher (basic, joblib, submitit), and the study is told how each ended from the
``result.json`` the job leaves (ok with its objective values, pruned, or failed).

The study lives in storage (by default ``sqlite:///<sweep dir>/optuna.db``), so jobs in other
processes report to their trial (pruning, see ``trial.py``) and a sweep continues: run the same
command with the same ``hydra.sweep.dir`` and the jobs that finished are not run again, a job that was
interrupted runs again with its own settings (continuing from its ``last.pt``), and new trials are
proposed for the jobs not yet run. Each trial records its sweep directory and job number
(``runner_sweep_dir``, ``runner_job``): data that tells a job which trial is its own."""

import logging
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override, Transformer
from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn, JobStatus, configure_log
from hydra.types import HydraContext, TaskFunction
from hydra.utils import instantiate
from omegaconf import DictConfig, ListConfig, OmegaConf

from runner.config.errors import ConfigError
from runner.config.job_dirs import find_job_dir
from runner.config.trust import targets_in
from runner.observe.records import recorded_result
from runner.search import trials_not_run
from runner.search.study import (
    FIXED_ATTR,
    JOB_ATTR,
    SWEEP_ATTR,
    check_runners_trials,
    check_sampler_loads_no_pickle,
    open_storage,
    quiet_optuna,
    storage_url,
    study_name_of,
)

log = logging.getLogger("runner")
RESULTS_FILE = "optimization_results.yaml"
FINISHED = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)


def distribution_of(override: Override) -> optuna.distributions.BaseDistribution | None:
    """The Optuna distribution of a param in Hydra's sweep syntax; None for a fixed value.
    ``interval(a, b)``: floats in [a, b] (``tag(log, ...)`` on a log scale); ``range(a, b, s)``: the
    values Hydra's range gives (b excluded), stepped; ``choice(...)``: those values."""
    if not override.is_sweep_override():
        return None
    key = override.get_key_element()
    if override.is_interval_sweep():
        interval = override.value()
        low, high = float(interval.start), float(interval.end)
        log_scale = "log" in interval.tags
        if low >= high or (log_scale and low <= 0):
            raise ConfigError(
                f"hydra.sweeper.params.{key}: interval({low:g}, {high:g}) is empty"
                + (" or not positive (a log scale needs 0 < low < high)" if log_scale else "")
            )
        return optuna.distributions.FloatDistribution(low, high, log=log_scale)
    values = list(override.sweep_iterator(transformer=Transformer.encode))
    if not values:
        raise ConfigError(f"hydra.sweeper.params.{key}: {override.input_line} gives no values")
    if override.is_range_sweep() and not override.value().shuffle and len(values) > 1:
        step = override.value().step
        if all(isinstance(value, int) for value in values):
            return optuna.distributions.IntDistribution(values[0], values[-1], step=int(step))
        return optuna.distributions.FloatDistribution(values[0], values[-1], step=float(step))
    return optuna.distributions.CategoricalDistribution(values)


@dataclass
class SearchSpace:
    distributions: dict[str, optuna.distributions.BaseDistribution]
    fixed: list[str]  # overrides every job gets (``key=value``), the command line's among them

    def overrides(self, params: dict[str, Any]) -> list[str]:
        return [*(f"{key}={value}" for key, value in params.items()), *self.fixed]

    def holds(self, params: dict[str, Any]) -> bool:
        """Whether ``params`` (a stored trial's, read from the study's database) are settings of this
        search: its keys, each value one its distribution allows. Nothing else from a database becomes
        a job's override (a stored key could name code, ``model._target_``)."""
        if set(params) != set(self.distributions):
            return False
        for key, value in params.items():
            distribution = self.distributions[key]
            if isinstance(distribution, optuna.distributions.CategoricalDistribution):
                if value not in distribution.choices:
                    return False
            elif not isinstance(value, (int, float)) or not within(value, distribution):
                return False
        return True

    def grid(self) -> dict[str, list[Any]]:
        """The search space as a grid (for ``GridSampler``): every param a choice or a range."""
        grid = {}
        for key, distribution in self.distributions.items():
            if isinstance(distribution, optuna.distributions.CategoricalDistribution):
                grid[key] = list(distribution.choices)
            elif isinstance(distribution, optuna.distributions.IntDistribution):
                grid[key] = list(range(distribution.low, distribution.high + 1, distribution.step))
            elif isinstance(distribution, optuna.distributions.FloatDistribution) and distribution.step:
                count = round((distribution.high - distribution.low) / distribution.step) + 1
                grid[key] = [distribution.low + index * distribution.step for index in range(count)]
            else:
                raise ConfigError(
                    f"hydra.sweeper.params.{key}: the grid sampler takes choice(...) or range(...), "
                    "not an interval"
                )
        return grid


def within(
    value: float, distribution: optuna.distributions.FloatDistribution | optuna.distributions.IntDistribution
) -> bool:
    """In a numeric distribution's range, give or take the rounding of a float grid's points
    (``low + index * step`` may land just above ``high``)."""
    low, high = distribution.low, distribution.high
    slack = 1e-9 * max(1.0, high - low)
    return low - slack <= value <= high + slack


def search_space(params: dict[str, str] | None, arguments: Sequence[str]) -> SearchSpace:
    """``hydra.sweeper.params`` and the command line's overrides: each in Hydra's sweep syntax is
    searched, the others are given to every job as they are (a key fixed on the command line is not
    searched)."""
    lines = [f"{key}={value}" for key, value in (params or {}).items()] + list(arguments)
    parsed = OverridesParser.create().parse_overrides(lines)
    distributions, fixed = {}, []
    for override in parsed:
        distribution = distribution_of(override)
        if distribution is None:
            fixed.append(override.input_line)
        else:
            distributions[override.get_key_element()] = distribution
    for override in parsed:  # a fixed value (the command line's) takes the key out of the search
        if not override.is_sweep_override():
            distributions.pop(override.get_key_element(), None)
    if not distributions:
        raise ConfigError("hydra.sweeper.params: nothing to search; give each searched key a range, e.g. "
                          "optimizer.lr: tag(log, interval(1e-4, 1e-1))")  # fmt: skip
    return SearchSpace(distributions, fixed)


def directions_of(direction: Any) -> list[str]:
    directions = list(direction) if isinstance(direction, (list, tuple, ListConfig)) else [direction]
    for value in directions:
        if value not in ("minimize", "maximize"):
            raise ConfigError(f"hydra.sweeper.direction={value}: a direction is minimize or maximize "
                              "(a list of them for several objectives)")  # fmt: skip
    return [str(value) for value in directions]


def objectives_of(objectives: Sequence[str] | None, directions: list[str], config: DictConfig) -> list[str]:
    """The metric each direction applies to: ``checkpoint.monitor`` for a single objective, unless
    named; a multi-objective search names them all. The monitored metric's direction must agree with
    ``checkpoint.mode`` (the best validation, best.pt and the pruner all go by it)."""
    monitor, mode = str(config.checkpoint.monitor), str(config.checkpoint.mode)
    names = [str(name) for name in objectives] if objectives else []
    if not names:
        if len(directions) > 1:
            raise ConfigError(
                f"hydra.sweeper.direction lists {len(directions)} directions; name the metric each applies "
                f"to with hydra.sweeper.objectives, e.g. [{monitor}, val/acc]"
            )
        names = [monitor]
    if len(names) != len(directions):
        raise ConfigError(f"hydra.sweeper.objectives names {len(names)} metrics for {len(directions)} "
                          "direction(s); give one direction per objective")  # fmt: skip
    wanted = {"min": "minimize", "max": "maximize"}.get(mode)
    for name, direction in zip(names, directions, strict=True):
        if name == monitor and direction != wanted:
            raise ConfigError(
                f"hydra.sweeper.direction={direction} for {monitor}, but checkpoint.mode={mode}; the search "
                f"would keep the worst runs: use direction {wanted}, or checkpoint.mode to match"
            )
    if monitor not in names:
        raise ConfigError(
            f"hydra.sweeper.objectives={names} leaves out checkpoint.monitor={monitor}, which each job's "
            "best validation is chosen by; list it among the objectives"
        )
    return names


def objective_values(result: dict[str, Any], objectives: list[str]) -> list[float] | None:
    values = result.get("objectives") if isinstance(result.get("objectives"), dict) else {}
    if not values and len(objectives) == 1:
        values = {objectives[0]: result.get("best")}
    picked = [values.get(name) for name in objectives]
    if any(not isinstance(value, (int, float)) or not math.isfinite(value) for value in picked):
        return None
    return [float(value) for value in picked]


def check_counts(n_trials: int, n_jobs: int, max_failure_rate: float) -> None:
    counts = {"n_trials": n_trials, "n_jobs": n_jobs}
    for key, value in counts.items():
        if value < 1:
            raise ConfigError(f"hydra.sweeper.{key}={value} is not allowed; it must be an integer >= 1")
    if not 0.0 <= max_failure_rate <= 1.0:
        raise ConfigError(f"hydra.sweeper.max_failure_rate={max_failure_rate} is not allowed; it must be a "
                          "number from 0 to 1")  # fmt: skip


def check_keys(space: SearchSpace, config: DictConfig) -> None:
    """Each searched key is a setting of the composed config (or a config group), and each value it may
    take is allowed: a typo fails here, before a trial is asked for."""
    from runner.cli.hydra_app import group_names, options_of
    from runner.config.checks import check_value

    missing = object()
    for key, distribution in space.distributions.items():
        given = f"hydra.sweeper.params.{key}"
        if key in group_names():
            choices = getattr(distribution, "choices", ())
            unknown = [c for c in choices if not isinstance(c, str) or c not in options_of(key)]
            if unknown:
                raise ConfigError(f"{given}: {unknown[0]} is not an option of {key}; {key} is one of "
                                  f"{', '.join(options_of(key))}")  # fmt: skip
            continue
        if OmegaConf.select(config, key, default=missing) is missing:
            raise ConfigError(f"{given}: the config has no key {key}")
        if isinstance(distribution, optuna.distributions.CategoricalDistribution):
            values = [value for value in distribution.choices if not isinstance(value, str)]
        else:
            values = [distribution.low, distribution.high]
        for value in values:
            try:
                check_value(key, value)
            except ConfigError as error:
                raise ConfigError(f"{given}: {error}") from None


def build(key: str, config: Any) -> Any:
    """A sampler or pruner from its settings; a setting its class refuses is named in one line."""
    try:
        return instantiate(config)
    except Exception as error:
        cause = error.__cause__ or error
        raise ConfigError(f"{key}: {str(cause).splitlines()[0]}") from None


def is_grid(sampler_config: Any) -> bool:
    return str(sampler_config.get("_target_", "")).endswith("GridSampler")


def open_checked_storage(url: str) -> optuna.storages.RDBStorage:
    try:
        return open_storage(url)
    except Exception as error:
        reason = str(error).splitlines()[0]
        raise ConfigError(
            f"hydra.sweeper.storage={url}: cannot open it ({reason}); give an Optuna storage URL such as "
            "sqlite:///outputs/optuna.db"
        ) from None


def check_same_search(
    study: optuna.Study, directions: list[str], space: SearchSpace, sweep_dir: Path, own_only: bool
) -> None:
    """A study continued (this sweep directory's, or one shared by several searches) must be this
    search's: the same directions, each searched key with a distribution its trials can share, and the
    jobs of this sweep directory run with the same fixed settings. Else nothing is written."""
    name, trials = study.study_name, study.get_trials(deepcopy=False)
    held = [d.name.lower() for d in study.directions]
    if held != directions:
        raise ConfigError(f"hydra.sweeper.study_name={name}: the study has directions {held}, this search "
                          f"{directions}; give it another study_name (or hydra.sweep.dir)")  # fmt: skip
    for trial in trials:
        for key, distribution in trial.distributions.items():
            if key in space.distributions:
                try:
                    optuna.distributions.check_distribution_compatibility(
                        distribution, space.distributions[key]
                    )
                except ValueError:
                    raise ConfigError(
                        f"hydra.sweeper.params.{key}: the study {name} searched it as {distribution}; this "
                        "search's range is of another kind; give it another study_name (or hydra.sweep.dir)"
                    ) from None
    for job, trial in own_trials(study, sweep_dir, own_only).items():
        fixed = trial.user_attrs.get(FIXED_ATTR)
        if fixed != space.fixed or not space.holds(trial.params):
            raise ConfigError(
                f"job {job} of {sweep_dir} ran with {' '.join(fixed or [])} {trial.params}, not with this "
                "search's settings: the sweep directory belongs to another search; give this one its own "
                "hydra.sweep.dir"
            )


def tell_study(study: optuna.Study, number: int, **outcome: Any) -> None:
    """The grid sampler asks the study to stop once its grid is done, which Optuna refuses outside its
    own loop; the outcome is stored all the same."""
    try:
        study.tell(number, **outcome)
    except RuntimeError as error:
        if "Study.stop" not in str(error):
            raise


class OptunaSearch:
    """The sweeper's work; ``hydra_plugins.runner_optuna_sweeper`` hands Hydra's calls to it."""

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

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    def sweep(self, arguments: list[str]) -> list[JobReturn]:
        """Check everything, open (or continue) the study, then run the jobs not yet finished, a batch
        of ``n_jobs`` at a time, telling the study how each ended."""
        quiet_optuna()
        self.directions = directions_of(self.direction)
        check_counts(self.n_trials, self.n_jobs, self.max_failure_rate)
        objectives = objectives_of(self.objectives_given, self.directions, self.config)
        space = search_space(self.params, arguments)
        check_keys(space, self.config)
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
        returns = self.run_jobs(study, mine, sweep_dir, space, objectives)
        write_results(sweep_dir / RESULTS_FILE, study, self.directions, objectives, sweep_dir, own_only)
        return returns

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
    ) -> list[JobReturn]:
        """Jobs 0 .. n_trials-1 that have not finished, in batches of consecutive numbers. A job that
        ends without a result (stopped by a signal) ends the search, its trial left running for the
        same command to continue; so do more failures than ``max_failure_rate`` allows."""
        returns: list[JobReturn] = []
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
            launched = self.launcher.launch(overrides, initial_job_idx=batch[0][0])
            configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)  # not a job's log
            returns += launched
            outcomes = [
                self.tell(study, trial.number, job_return, job_dir(sweep_dir, job), objectives)
                for (job, trial), job_return in zip(batch, launched, strict=True)
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
        return returns

    def make_sampler(self, space: SearchSpace, earlier_trials: int) -> optuna.samplers.BaseSampler:
        """The configured sampler. A seeded one continuing a study is seeded ``seed + trials so far``:
        with its first seed it would propose again the points it began with."""
        config = OmegaConf.to_container(self.sampler_config, resolve=True)
        assert isinstance(config, dict)
        if config.get("seed") is not None and earlier_trials:
            config["seed"] = int(config["seed"]) + earlier_trials
        sampler = build("hydra.sweeper.sampler", config)
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
        job_return: JobReturn,
        job_dir: Path,
        objectives: list[str],
    ) -> str:
        """Tell the study how job ended; returns ok, pruned, failed or interrupted (no result: stopped
        by a signal, its trial stays running so that the same command continues it)."""
        result = recorded_result(job_dir)
        status = result.get("status")
        if job_return.status == JobStatus.FAILED and status is None:
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
            self.tell(study, trial.number, JobReturn(status=JobStatus.COMPLETED), job_dir, objectives)


def name_objectives(study: optuna.Study, objectives: list[str]) -> None:
    """The study's values by the metrics they are (``val/loss``): optuna-dashboard shows these names,
    not "Objective 0". Optuna marks the call experimental (since 3.2); its warning says only that."""
    if study.metric_names != objectives:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(objectives)


def existing_study(storage: Any, name: str) -> optuna.Study | None:
    """The study ``name`` if the storage holds it (with trials or not), else None."""
    if name not in optuna.study.get_all_study_names(storage):
        return None
    return optuna.load_study(study_name=name, storage=storage)


def own_trials(study: optuna.Study, sweep_dir: Path, own_only: bool) -> dict[int, Any]:
    """This sweep directory's trials by job number (the latest attempt of each job). ``own_only``: the
    study lives in the sweep directory, so its trials are this sweep's wherever the directory was moved."""
    mine: dict[int, Any] = {}
    for trial in study.get_trials(deepcopy=False):
        if own_only and isinstance(trial.user_attrs.get(JOB_ATTR), int):
            mine[trial.user_attrs[JOB_ATTR]] = trial
            continue
        if trial.user_attrs.get(SWEEP_ATTR) == str(sweep_dir) and isinstance(
            trial.user_attrs.get(JOB_ATTR), int
        ):
            mine[trial.user_attrs[JOB_ATTR]] = trial
    return mine


def job_dir(sweep_dir: Path, number: int) -> Path:
    """Job ``number``'s directory (``003_optimizer.lr=0.01``); where it has none yet, a path that holds
    nothing (no result)."""
    return find_job_dir(sweep_dir, number) or sweep_dir / str(number)


def is_finished(trial: Any, sweep_dir: Path, number: int) -> bool:
    """Whether job ``number`` finished (ok or pruned): its trial says so, or its ``result.json`` does
    (the sweep was stopped before the study was told)."""
    if trial is None:
        return False
    if trial.state in FINISHED:
        return True
    return trial.state == optuna.trial.TrialState.RUNNING and recorded_result(job_dir(sweep_dir, number)).get(
        "status"
    ) in ("ok", "pruned")


def write_results(
    path: Path,
    study: optuna.Study,
    directions: list[str],
    objectives: list[str],
    sweep_dir: Path,
    own_only: bool,
) -> None:
    """``optimization_results.yaml``: the study's best trial (or its Pareto front), the job each came
    from, and the directions and objectives (the summary marks the Pareto front by them)."""
    complete = [t for t in study.get_trials(deepcopy=False) if t.state == optuna.trial.TrialState.COMPLETE]
    results: dict[str, Any] = {"name": "optuna", "study_name": study.study_name, "directions": directions,
                               "objectives": objectives}  # fmt: skip

    def job_of(trial: Any) -> int | None:
        here = own_only or trial.user_attrs.get(SWEEP_ATTR) == str(sweep_dir)
        return trial.user_attrs.get(JOB_ATTR) if here else None

    if complete and len(directions) == 1:
        best = study.best_trial
        results.update(best_params=dict(best.params), best_value=best.value, best_trial=best.number,
                       best_job=job_of(best))  # fmt: skip
    elif complete:
        results["solutions"] = [
            {"trial": t.number, "job": job_of(t), "params": dict(t.params), "values": list(t.values)}
            for t in study.best_trials
        ]
    path.write_text(OmegaConf.to_yaml(OmegaConf.create(results)))
