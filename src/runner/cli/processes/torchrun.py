"""``torchrun ... -m runner train``: every rank joins the process group and runs in rank 0's run
directory; a group torchrun restarts, of several processes or of one, continues its run there."""

import os

from runner.cli.arguments import CommandLine, for_rank, value_text
from runner.cli.processes.restarts import continuing, run_dir_across_restarts
from runner.config.errors import ConfigError
from runner.config.schema import PEER_TIMEOUT_S

SWEEP_PLUGIN_GROUPS = ("hydra/launcher", "hydra/sweeper", "hparams_search")


def under_torchrun(command_line: CommandLine) -> CommandLine:
    """Start the process group and give every rank rank 0's directory. A sweep runs its jobs one after
    another, each on every rank, with Hydra's basic launcher and sweeper."""
    from runner.training.distributed import start_process_group

    if command_line.sweep:
        for override in command_line.overrides:
            if override.key_or_group.lstrip("+~") in SWEEP_PLUGIN_GROUPS:
                raise ConfigError(
                    f"{override.input_line}: under torchrun a sweep runs each job on every rank, one job "
                    "after another (Hydra's basic launcher and sweeper); for parallel or Optuna sweeps of "
                    "multi-process jobs, use a submitit launcher with hydra.launcher.tasks_per_node instead "
                    "of torchrun"
                )
    timeout = command_line.last("peer_timeout_s")
    start_process_group(PEER_TIMEOUT_S if timeout is None else timeout.value())
    return in_run_dir_across_restarts(command_line, int(os.environ["RANK"]))


def alone_under_torchrun(command_line: CommandLine) -> CommandLine:
    """torchrun with one process (``--nproc-per-node 1`` on one node): no process group, but a restart
    (``--max-restarts``) continues the run in its folder, as a group of several does. A sweep, or a
    process torchrun did not start, is left as it is."""
    if command_line.sweep or not os.environ.get("TORCHELASTIC_RUN_ID"):  # torchrun sets it in its workers
        return command_line
    return in_run_dir_across_restarts(command_line, 0)


def in_run_dir_across_restarts(command_line: CommandLine, rank: int) -> CommandLine:
    """Every rank in rank 0's run (or sweep) directory; at a torchrun restart, the first start's, where
    the run continues (restarts.py)."""
    from runner.training.distributed import shared_run_dir

    given = command_line.last("hydra.sweep.dir" if command_line.sweep else "hydra.run.dir")
    parent = "outputs/multirun" if command_line.sweep else "outputs"
    named = value_text(given) if given else None
    run_dir, restarted = run_dir_across_restarts(
        named, command_line.sweep, lambda proposed: shared_run_dir(proposed, parent)
    )
    command_line = for_rank(command_line, run_dir, rank)
    return continuing(command_line, run_dir, rank) if restarted else command_line
