"""What Hydra says about the job it is running, read once: the ``Job`` the Hydra-free lifecycle is
handed (``runner.experiment.job``), the job's output folder, and Hydra's ``instantiate`` as the function
that builds what a config's ``_target_`` names."""

import os
from pathlib import Path
from typing import Any

import hydra.utils
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import OmegaConf

from runner.experiment.job_facts import Job

build = hydra.utils.instantiate


def output_dir() -> Path:
    """The folder Hydra runs this job in (the run's directory, or a sweep job's)."""
    return Path(HydraConfig.get().runtime.output_dir)


def this_job() -> Job:
    """What Hydra says about the job being run, and its place in a distributed run."""
    hydra_config = HydraConfig.get()
    in_sweep = hydra_config.mode == RunMode.MULTIRUN
    launcher = str(hydra_config.launcher.get("_target_", ""))
    return Job(
        run_dir=Path(hydra_config.runtime.output_dir),
        name=hydra_config.job.name,
        in_sweep=in_sweep,
        number=hydra_config.job.num if in_sweep else 0,  # unset outside a sweep
        # As written: an override may hold an interpolation that typed_config() names if it fails.
        overrides=OmegaConf.to_container(hydra_config.overrides.task, resolve=False),
        sweep_dir=Path(hydra_config.sweep.dir) if in_sweep else None,
        jobs_in_this_process="BasicLauncher" in launcher,
        jobs_in_workers="JoblibLauncher" in launcher,
        sweeper=hydra_config.sweeper,
        runner_search=in_sweep and is_runner_search(hydra_config.sweeper),
        rank=int(os.environ.get("RANK", 0)),
        world_size=int(os.environ.get("WORLD_SIZE", 1)),
    )


def is_runner_search(sweeper: Any) -> bool:
    """Whether the sweep is runner's Optuna search (its jobs report to their trials)."""
    from hydra_plugins.runner_optuna_sweeper.config import SWEEPER_TARGET

    return sweeper.get("_target_") == SWEEPER_TARGET
