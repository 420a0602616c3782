"""The environment variables that say how many processes run and which one this is (torchrun sets
``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``), checked once before a
command starts: a junk value is one line, not a traceback from deep inside torch. Torch-free, so the
check costs nothing."""

import os

from runner.config.errors import ConfigError

START_SEVERAL = (
    "start several processes with torchrun (python -m torch.distributed.run --nproc_per_node=N -m runner "
    "train ...), or unset WORLD_SIZE, RANK and LOCAL_RANK to run one"
)


def integer_variable(name: str, minimum: int, below: int, allowed: str) -> int | None:
    """``name``'s value as an integer in [minimum, below); None when it is not set."""
    text = os.environ.get(name)
    if text is None:
        return None
    try:
        value = int(text.strip())
    except ValueError:
        value = None
    if value is None or not minimum <= value < below:
        shown = text if len(text) <= 40 else text[:30] + f"... ({len(text)} characters)"
        raise ConfigError(
            f"{name}={shown!r} (an environment variable) is not allowed; {name} must be {allowed}; "
            + START_SEVERAL
        )
    return value


def check_process_environment() -> None:
    """WORLD_SIZE an integer >= 1; RANK and LOCAL_RANK integers below it; with several processes,
    the rendezvous address torch needs."""
    world_size = integer_variable("WORLD_SIZE", 1, 2**31, "an integer >= 1 (the number of processes)")
    size = world_size or 1
    rank_allowed = (
        f"an integer in [0, {size}) (WORLD_SIZE={size})" if world_size else "0 (WORLD_SIZE is not set)"
    )
    integer_variable("RANK", 0, size, rank_allowed)
    local_size = integer_variable("LOCAL_WORLD_SIZE", 1, size + 1, f"an integer in [1, {size}]")
    within = local_size or size
    integer_variable("LOCAL_RANK", 0, within, f"an integer in [0, {within}) (the processes on this machine)")
    if size == 1:
        return
    missing = [name for name in ("RANK", "MASTER_ADDR", "MASTER_PORT") if not os.environ.get(name)]
    if missing:
        raise ConfigError(
            f"WORLD_SIZE={size} asks for {size} processes, but {', '.join(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} not set; " + START_SEVERAL
        )
    integer_variable("MASTER_PORT", 1, 2**16, "a port number in [1, 65535]")
