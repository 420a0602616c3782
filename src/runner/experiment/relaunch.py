"""The command that continues an interrupted run, as the log prints it: the way the run was started.

Under torchrun every worker is started by torchrun's agent, so the agent's own command line (its
parent process's) holds the options the user gave: the process count, the nodes, the rendezvous.
The resume command keeps those options and runs ``-m runner train resume=RUN_DIR``, with the run's
config folders and ``_target_`` overrides (a resume never takes them from the run directory). Where
that command line cannot be read (no ``/proc``), it is rebuilt from what torchrun exports to its
workers.
"""

import os
import shlex
import sys
from pathlib import Path

from runner.config.project import user_pythonpath

# What a command line starts torchrun with, and how the printed command names it.
LAUNCHERS = {("-m", "torch.distributed.run"): "python -m torch.distributed.run", ("torchrun",): "torchrun"}


def resume_command(run_dir: Path) -> str:
    """``python -m runner train resume=RUN_DIR``, or under torchrun the torchrun command that resumes
    with the same processes (a checkpoint resumes only with the world size that saved it); with the
    config folders and ``_target_``s this run was given, which a resume takes only from its own
    command line, never from the run directory."""
    resume = ["-m", "runner", "train", f"resume={run_dir}", *given_again(sys.argv[1:])]
    # The code the run imports, as the user made it importable (a project's runner finds itself).
    pythonpath = user_pythonpath()
    environment = f"PYTHONPATH={shlex.quote(pythonpath)} " if pythonpath else ""
    if not os.environ.get("TORCHELASTIC_RUN_ID"):  # set by torchrun for every worker it starts
        return environment + shlex.join(["python", *resume])
    launched = torchrun_options(parent_command_line())
    if launched is None:
        launched = ("torchrun", options_from_environment())
    launcher, options = launched
    command = environment + " ".join([launcher, shlex.join([*options, *resume])])
    several_nodes = os.environ.get("WORLD_SIZE", "1") != os.environ.get("LOCAL_WORLD_SIZE", "1")
    return command + (" (on every node, as the run was started)" if several_nodes else "")


def given_again(arguments: list[str]) -> list[str]:
    """The arguments of this process's command line that a resume needs again, as it takes them only
    from its own command line: the config folders (``hydra.searchpath``) and the code to build (any
    override naming a ``_target_``)."""
    return [
        argument
        for argument in arguments
        if argument.lstrip("+").startswith("hydra.searchpath=") or "_target_" in argument
    ]


def parent_command_line() -> list[str]:
    """The command line of the process that started this one (torchrun's agent); empty where the
    system does not show it."""
    try:
        raw = Path(f"/proc/{os.getppid()}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def torchrun_options(command_line: list[str]) -> tuple[str, list[str]] | None:
    """How torchrun was called and its options (everything before the script it ran), read from its
    command line with torchrun's own parser; None where ``command_line`` is not torchrun's."""
    from torch.distributed.run import parse_args

    for index in range(len(command_line)):
        for tokens, launcher in LAUNCHERS.items():
            here = command_line[index : index + len(tokens)]
            if len(tokens) == 1:
                here = [Path(part).name for part in here]
            if here == list(tokens):
                arguments = command_line[index + len(tokens) :]
                try:
                    parsed = parse_args(arguments)
                except SystemExit:  # argparse's way to refuse
                    return None
                options = arguments[: len(arguments) - 1 - len(parsed.training_script_args)]
                if options and options[-1] in ("-m", "--module"):
                    options = options[:-1]  # the printed command adds its own: -m runner
                return launcher, options
    return None


def options_from_environment() -> list[str]:
    """torchrun's options rebuilt from what it exports to its workers: the process count per node and
    the number of nodes (with several, the rendezvous options must be added by hand)."""
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    nodes = int(os.environ.get("WORLD_SIZE", per_node)) // per_node
    if nodes == 1:
        return ["--standalone", f"--nproc_per_node={per_node}"]
    return [f"--nnodes={nodes}", f"--nproc_per_node={per_node}"]
