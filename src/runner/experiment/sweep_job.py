"""What a job of a sweep needs beyond a single run: the line that names it, its trial of runner's
Optuna search, and a GPU of its own when jobs run side by side on this machine."""

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

from runner.config.schema import RunConfig
from runner.experiment.sweep_stop import swept_in


def swept_settings(overrides: list[str], swept: list[str], sweeper: Mapping[str, Any]) -> str:
    """A sweep job's overrides as its console lines name the job: those the sweep varies (the command
    line's swept keys, a sweeper's ``params``); all of them when none is known."""
    keys = {*swept, *(sweeper.get("params") or {})}
    return " ".join(swept_in(overrides, keys)) or "(no overrides)"


def objectives_of_job(sweeper: Mapping[str, Any], config: RunConfig) -> list[str]:
    """The metrics a search job returns to its study: the sweeper's ``objectives``, else the monitor."""
    return [str(name) for name in sweeper.get("objectives") or [config.checkpoint.monitor]]


def search_trial(
    config: RunConfig, sweeper: Mapping[str, Any], sweep_dir: Path, number: int, world_size: int,
    build: Callable[[Any], Any],
) -> Any:  # fmt: skip
    """The callback that gives a search job its objective values and, with a pruner (``build`` makes
    it from the sweeper's settings), reports to its trial after every validation."""
    from runner.search.trial import SearchTrial, link_to_trial

    link = None
    if sweeper.get("pruner"):
        link = link_to_trial(sweeper, build(sweeper["pruner"]), sweep_dir, number)
    samples_per_step = None  # it validates at epoch ends: reported at the epochs done
    if config.trainer.val_every_n_steps is not None:
        samples_per_step = config.data.batch_size * config.accumulate * world_size
    objectives = tuple(objectives_of_job(sweeper, config))
    return SearchTrial(config.checkpoint.monitor, config.checkpoint.mode, link, samples_per_step, objectives)


def gpu_of_parallel_job(device: str, sweep_dir: Path, number: int) -> AbstractContextManager[Any]:
    """A job of a sweep whose jobs run at the same time on this machine (the joblib launcher) takes a
    GPU no other running job holds, when there are several and the job asks for CUDA (``device=auto``
    or ``cuda``)."""
    if device not in ("auto", "cuda"):
        return nullcontext()
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count < 2:
        return nullcontext()
    from runner.search.claims import claimed_gpu

    return claimed_gpu(sweep_dir, count, number, torch.cuda.set_device)
