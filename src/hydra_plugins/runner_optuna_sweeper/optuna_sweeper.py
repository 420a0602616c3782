"""The Hydra Sweeper class (Hydra instantiates it from ``hydra.sweeper``); the search is in
``runner.cli.optuna_search``, imported only when a search runs."""

from typing import Any

from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


class OptunaSweeper(Sweeper):
    """Proposes each job's settings from an Optuna study, launches the jobs with Hydra's launcher and
    tells the study how each ended (ok, pruned or failed)."""

    def __init__(self, **settings: Any) -> None:
        from runner.cli.optuna_search import OptunaSearch

        self.search = OptunaSearch(**settings)

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.search.setup(hydra_context=hydra_context, task_function=task_function, config=config)

    def sweep(self, arguments: list[str]) -> Any:
        return self.search.sweep(arguments)
