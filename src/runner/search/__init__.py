"""Searches over settings, without Hydra: runner's Optuna search (the trial loop in ``loop``, its study
in ``storage``, ``study`` and ``trials``, what it searches in ``space`` and ``settings``), what a job of
a search does (``trial``), sweeps that continue (``continuation``), and what a sweep's processes hold
(``claims``: a search's jobs, one GPU per parallel job). ``hydra_plugins.runner_optuna_sweeper`` adapts
it to Hydra."""

# What a stopped search did not start (``N more trials``), for the line that says how the sweep ended.
trials_not_run: list[str] = []
# What several sweeper processes of one search need, for the line that refuses or warns about SQLite.
SEVERAL_PROCESSES = (
    "use hydra.sweeper.storage=journal (a file in the sweep folder, made for several processes and shared "
    "filesystems) or a PostgreSQL URL"
)


def shared_by_processes(storage: str | None) -> bool:
    """Whether several sweeper processes may run this search at once: a journal file or a database
    server; SQLite is one process's (``runner.cli.hydra.write_guard`` refuses a second one). Here, not in
    ``storage``, so that the check of a sweep's folder reads it without importing Optuna."""
    return storage is not None and not storage.startswith("sqlite:")
