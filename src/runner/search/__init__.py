"""Searches over settings: runner's Optuna sweeper (``optuna_search``), what a job of a search does
(``trial``), sweeps that continue (``continuation``) and one GPU per parallel job (``gpus``)."""

# What a stopped search did not start (``N more trials``), for the line that says how the sweep ended.
trials_not_run: list[str] = []
