"""How a search's trials are tied to sweep jobs, Optuna's messages, and the samplers and studies runner
refuses: the parts both the sweeper and its jobs (in other processes) need. Imports Optuna."""

import logging

import optuna

from runner.config.errors import ConfigError

SWEEP_ATTR = "runner_sweep_dir"  # a trial's user attributes: the sweep directory and job it ran as
JOB_ATTR = "runner_job"
FIXED_ATTR = "runner_fixed"  # the overrides every job of its search got (the command line's)
DEFAULT_STUDY = "runner"
RUNNERS_ATTRS = {SWEEP_ATTR, JOB_ATTR, FIXED_ATTR}


def quiet_optuna() -> None:
    """Optuna's messages through Python's logging, as Hydra set it up (console and train.log, no
    colour codes in files), warnings only: the jobs' own lines say how each trial went."""
    optuna.logging.disable_default_handler()
    optuna.logging.enable_propagation()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    logging.getLogger("optuna").setLevel(logging.WARNING)


# Samplers that keep their state as a pickle in the study's storage and load it back from there on
# every proposal (Optuna's CmaEsSampler: ``cma:optimizer`` system attributes, ``pickle.loads``): a
# study's database, or anyone who can write to it, would choose code for them to run.
PICKLING_SAMPLERS = ("CmaEsSampler",)


def check_sampler_loads_no_pickle(sampler: optuna.samplers.BaseSampler, targets: list[str]) -> None:
    """Refuse a sampler that restores pickled state from storage: ``sampler`` as built, ``targets``
    the ``_target_``s of its settings (a sampler inside another, ``base_sampler``)."""
    names = [target.rsplit(".", 1)[-1] for target in targets]
    if isinstance(sampler, optuna.samplers.CmaEsSampler) or any(name in PICKLING_SAMPLERS for name in names):
        raise ConfigError(
            "hydra.sweeper.sampler: Optuna's CmaEsSampler keeps its state as a pickle in the study's storage "
            "and loads it back from there, so a study file could make it run code; runner does not run "
            "it: use hydra/sweeper/sampler=tpe, gp or another sampler"
        )


def is_runners_trial(trial: optuna.trial.FrozenTrial) -> bool:
    """Whether a stored trial carries what runner writes with every trial it creates."""
    attrs = trial.user_attrs
    return (
        isinstance(attrs.get(JOB_ATTR), int)
        and isinstance(attrs.get(SWEEP_ATTR), str)
        and isinstance(attrs.get(FIXED_ATTR), list)
    )


def check_runners_trials(study: optuna.Study, url: str) -> None:
    """A search continues only a study of runner's trials: the sampler learns from every trial in it,
    so one that something else wrote (a forged database) is refused before anything is written."""
    for trial in study.get_trials(deepcopy=False):
        if trial.state == optuna.trial.TrialState.RUNNING and set(trial.user_attrs) <= RUNNERS_ATTRS:
            continue  # another sweeper process's trial, asked for a moment ago: its attributes come next
        if not is_runners_trial(trial):
            raise ConfigError(
                f"hydra.sweeper.study_name={study.study_name}: {url} holds trial {trial.number}, which "
                f"runner did not write (no {JOB_ATTR}, {SWEEP_ATTR} and {FIXED_ATTR} attributes); a search "
                "continues only a study of its own trials: give it another study_name, storage or "
                "hydra.sweep.dir (nothing was changed)"
            )
