"""The Hydra Sweeper class (Hydra instantiates it from ``hydra.sweeper``): a thin adapter that hands
the search in ``runner.search.loop`` what only Hydra knows (the search space in Hydra's sweep syntax,
``_target_`` configs, the launcher). Imported only when a search runs."""

from typing import Any

from hydra.core.plugins import Plugins
from hydra.core.utils import JobStatus, configure_log
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from hydra.utils import instantiate
from omegaconf import DictConfig

from runner.config.errors import ConfigError


def build(key: str, config: Any) -> Any:
    """A sampler or pruner from its settings; a setting its class refuses is named in one line."""
    try:
        return instantiate(config)
    except Exception as error:
        cause = error.__cause__ or error
        raise ConfigError(f"{key}: {str(cause).splitlines()[0]}") from None


class OptunaSweeper(Sweeper):
    """Proposes each job's settings from an Optuna study, launches the jobs with Hydra's launcher and
    tells the study how each ended (ok, pruned or failed)."""

    def __init__(self, **settings: Any) -> None:
        from runner.search.loop import OptunaSearch

        self.search = OptunaSearch(**settings)

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    def sweep(self, arguments: list[str]) -> None:
        from runner.cli.hydra.optuna_space import check_keys, search_space

        def read_space() -> Any:
            space = search_space(self.search.params, arguments)
            check_keys(space, self.config)
            return space

        # Hydra's basic launcher runs each job in this process: one at a time. The joblib and submitit
        # launchers run them in other processes, so several batches of one may run at once.
        parallel = type(self.launcher).__name__ != "BasicLauncher"
        self.search.sweep(self.config, read_space, build, self.launch, parallel)

    def launch(self, overrides: list[str], number: int) -> bool:
        """Run job ``number`` with Hydra's launcher, as a batch of one (a search's slot, in a thread of
        its own when jobs run in other processes); whether it failed (Hydra caught its error)."""
        (job_return,) = self.launcher.launch([overrides], initial_job_idx=number)
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)  # not a job's log
        return job_return.status == JobStatus.FAILED
