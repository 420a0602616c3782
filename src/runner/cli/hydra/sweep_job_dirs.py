"""The name of a sweep job's directory (``hydra.sweep.subdir``): the job's number, zero-padded, then the
settings the sweep varies (``003_optimizer.lr=0.01,seed=1``, see ``runner.config.job_dirs``).

A job's config knows its own overrides, not which of them the sweep varies: that is in the sweep's
command line (``optimizer.lr=0.001,0.01``) and its sweeper's ``params``. Hydra composes each job's
config from the sweep's and copies the sweep's resolver cache into it (so ``${now:}`` is one time for
every job). ``${sweep_overrides:${hydra.overrides.task}}`` is a cached resolver: resolved once in the
sweep's own process, by the callback ``SweepOverrides`` that Hydra instantiates there before any job
starts, it gives every job the sweep's command-line overrides, wherever the launcher runs the job.
Where that callback is not configured, a job's name carries the sweeper's ``params`` only."""

import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.errors import HydraException
from hydra.experimental.callback import Callback
from omegaconf import ListConfig, OmegaConf

from runner.config.job_dirs import find_job_dir, job_dir_name


def parsed(lines: Iterable[str]) -> list[Override]:
    """Overrides Hydra has already parsed once (a line it cannot parse is left out)."""
    parser, overrides = OverridesParser.create(), []
    for line in lines:
        try:
            overrides += parser.parse_overrides([line])
        except HydraException:
            continue
    return overrides


def sweep_plan(command_line: list[str], sweeper: Any) -> tuple[set[str], int]:
    """The keys the sweep varies (a sweep in its ``params`` or on its command line; a value fixed on
    the command line takes a key out), and how many jobs it has: a search's ``n_trials``, else the
    product of each swept key's values (0 where that cannot be counted)."""
    params = dict(sweeper.get("params") or {}) if sweeper is not None else {}
    overrides = parsed([f"{key}={value}" for key, value in params.items()] + command_line)
    fixed = {o.get_key_element() for o in overrides[len(params) :] if not o.is_sweep_override()}
    last = {o.get_key_element(): o for o in overrides if o.is_sweep_override()}
    swept = {key: override for key, override in last.items() if key not in fixed}
    trials = sweeper.get("n_trials") if sweeper is not None else None
    if isinstance(trials, int):
        return set(swept), trials
    try:
        return set(swept), math.prod(len(list(override.sweep_iterator())) for override in swept.values())
    except (HydraException, TypeError, ValueError):
        return set(swept), 0


def sweep_job_dir(command_line: str, *, _root_: Any) -> str:
    """``hydra.sweep.subdir``: the name of this job's directory. A job that already has one in the sweep
    directory (a continued sweep, one named the old way) keeps it."""
    hydra = _root_.hydra
    number = OmegaConf.select(hydra, "job.num", throw_on_missing=False)
    if number is None:  # not a job's config: a run's, shown by --cfg hydra --resolve
        return "${hydra.job.num}"
    found = find_job_dir(Path(str(hydra.sweep.dir)), int(number))
    if found is not None:
        return found.name
    swept, jobs = sweep_plan(overrides_of(command_line), hydra.get("sweeper"))
    own = parsed(str(line) for line in as_written(hydra.overrides.task))
    settings = [
        (o.get_key_element(), o.input_line.partition("=")[2]) for o in own if o.get_key_element() in swept
    ]
    return job_dir_name(int(number), jobs, settings)


def overrides_of(command_line: Any) -> list[str]:
    """``sweep_job_dir``'s argument, checked: a command line given there by hand may be anything."""
    try:
        lines = json.loads(command_line) if isinstance(command_line, str) else None
    except ValueError:
        lines = None
    if not (isinstance(lines, list) and all(isinstance(line, str) for line in lines)):
        raise ValueError(f"sweep_job_dir takes {SUBDIR_ARGUMENT}, not {command_line!r}")
    return lines


SUBDIR_ARGUMENT = "${sweep_overrides:${hydra.overrides.task}}"


def sweep_overrides(task: Any) -> str:
    """The sweep's command-line overrides, as JSON text: a resolver's value where a config holds text
    (a callback's setting, ``--cfg hydra --resolve``)."""
    # "$" as JSON's \u0024: Hydra builds its callbacks from a config made anew from resolved values, where
    # a "${" in this text would be an interpolation again.
    return json.dumps([str(line) for line in as_written(task)]).replace("$", "\\u0024")


def as_written(lines: Any) -> list:
    """Overrides as the command line gave them: one holding an interpolation (``model.hidden=[64,${x}]``)
    is text here, and the run's own check names it if it cannot be resolved."""
    if isinstance(lines, ListConfig):
        return OmegaConf.to_container(lines, resolve=False)
    if lines is not None and not isinstance(lines, list | tuple):
        raise ValueError(f"sweep_overrides takes ${{hydra.overrides.task}}, not {lines!r}")
    return list(lines or [])


OmegaConf.register_new_resolver("sweep_overrides", sweep_overrides, use_cache=True, replace=True)
OmegaConf.register_new_resolver("sweep_job_dir", sweep_job_dir, replace=True)


class SweepOverrides(Callback):
    """Hydra instantiates its callbacks in the sweep's process before the sweep starts: resolving
    ``overrides`` (``${sweep_overrides:${hydra.overrides.task}}``) here caches the sweep's command line
    in the config every job's config is composed from."""

    def __init__(self, overrides: Any = None) -> None:
        self.overrides = overrides
