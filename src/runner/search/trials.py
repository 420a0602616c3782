"""The search's trials in its study: checked to be this search's, this sweep directory's trials by
job number, how each job is told to it, and ``optimization_results.yaml``."""

import warnings
from pathlib import Path
from typing import Any

import optuna
from omegaconf import OmegaConf

from runner.config.errors import ConfigError
from runner.config.job_dirs import find_job_dir
from runner.observe.records import recorded_result
from runner.search.space import SearchSpace
from runner.search.study import FIXED_ATTR, JOB_ATTR, SWEEP_ATTR

RESULTS_FILE = "optimization_results.yaml"
FINISHED = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)


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


def name_objectives(study: optuna.Study, objectives: list[str]) -> None:
    """The study's values by the metrics they are (``val/loss``): optuna-dashboard shows these names,
    not "Objective 0". Optuna marks the call experimental (since 3.2); its warning says only that."""
    if study.metric_names != objectives:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(objectives)


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
