"""The trackers ``logger=[...]`` can name: one entry each, the one list the config's check, the
installed-check and the run's opening of the trackers read (docs/development.md, "Adding a tracker").

An entry names its tracker's class as a string, imported only when a run names it: the config layer
imports nothing of ``observe``, and a default run imports neither mlflow nor wandb (mlflow's import alone
takes about a second).
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class TrackerEntry:
    """One tracker: the class that opens its run, and the optional library it needs."""

    # "module:Class", called with a TrackerStart (observe/trackers.py); None: TensorBoard, whose event
    # files every run writes anyway.
    opens: str | None = None
    # The library it imports, an optional extra of runner's of the tracker's name (pyproject.toml); a run
    # that names the tracker without it is refused before anything is written. None: nothing to install.
    package: str | None = None


# In the order ``logger``'s help and refusals list them. A tracker with settings of its own reads the
# config's section of its name (config.mlflow, config.wandb: schema.py's RunConfig).
TRACKERS: dict[str, TrackerEntry] = {
    "tensorboard": TrackerEntry(),
    "mlflow": TrackerEntry("runner.observe.mlflow_tracker:MlflowTracker", package="mlflow"),
    "wandb": TrackerEntry("runner.observe.wandb_tracker:WandbTracker", package="wandb"),
    "csv": TrackerEntry("runner.observe.csv_tracker:CsvTracker"),
}
