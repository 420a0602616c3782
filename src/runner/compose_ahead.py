"""Compose the config in a forked process while this one imports torch.

A run's start-up is serial: Hydra composes the config (about 0.12 s on a 2-core machine), then the run
imports torch (over 1 s). They do not depend on each other, and a thread cannot overlap them (both hold
the GIL), but a second process can: a child forked before torch is imported composes exactly as Hydra
would here, with the same code, arguments and files, and hands the composed config back through a
pipe; Hydra's composition in this process then takes it instead of composing again. Anything else
(the child failing, a composition asked with other arguments) composes here as before, so errors and
their messages are Hydra's own, printed once.
"""

import os
import pickle
import sys
import warnings
from collections.abc import Callable
from typing import Any

from hydra._internal.config_loader_impl import ConfigLoaderImpl


def worthwhile() -> bool:
    """Only where a fork is cheap and a second core can run the child alongside; ``RUNNER_COMPOSE_AHEAD=0``
    turns it off (it is decided before there is a config to hold such a setting)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return hasattr(os, "fork") and cores > 1 and os.environ.get("RUNNER_COMPOSE_AHEAD", "1") != "0"


class ComposedAhead:
    """The child's composed config, handed to the first matching composition in this process."""

    def __init__(self, read_end: int, child: int) -> None:
        self._read_end, self._child = read_end, child

    def install(self) -> None:
        """Make Hydra's next composition take the child's result (waiting for it if need be)."""
        with os.fdopen(self._read_end, "rb") as pipe:
            payload = pipe.read()
        os.waitpid(self._child, 0)
        if not payload:
            return  # the child failed: Hydra composes here and reports the error itself
        arguments, config, warned = pickle.loads(payload)
        compose = ConfigLoaderImpl.load_configuration

        def take_composed(self: ConfigLoaderImpl, *args: Any, **kwargs: Any) -> Any:
            ConfigLoaderImpl.load_configuration = compose  # one composition only
            if (args, kwargs) != arguments:
                return compose(self, *args, **kwargs)
            for message, category, filename, lineno in warned:  # what composing here would have warned
                warnings.warn_explicit(message, category, filename, lineno)
            return config

        ConfigLoaderImpl.load_configuration = take_composed


def compose_in_child(hydra_main: Callable[[], Any]) -> ComposedAhead:
    """Fork a child that runs ``hydra_main`` only as far as composing the config, and sends that back.
    Call before importing torch (forking is safe while the process has a single thread)."""
    sys.stdout.flush()  # nothing buffered before the fork is printed twice
    sys.stderr.flush()
    read_end, write_end = os.pipe()
    child = os.fork()
    if child:
        os.close(write_end)
        return ComposedAhead(read_end, child)
    os.close(read_end)
    try:
        silent = os.open(os.devnull, os.O_WRONLY)
        os.dup2(silent, 1)  # anything the child would print, this process prints when it composes
        os.dup2(silent, 2)
        compose = ConfigLoaderImpl.load_configuration

        def compose_and_send(self: ConfigLoaderImpl, *args: Any, **kwargs: Any) -> None:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("default")
                config = compose(self, *args, **kwargs)
            warned = [(w.message, w.category, w.filename, w.lineno) for w in caught]
            payload = pickle.dumps(((args, kwargs), config, warned))
            with os.fdopen(write_end, "wb") as pipe:
                pipe.write(payload)
            os._exit(0)

        ConfigLoaderImpl.load_configuration = compose_and_send
        hydra_main()
    finally:
        os._exit(1)  # never return into the parent's code, whatever happened
