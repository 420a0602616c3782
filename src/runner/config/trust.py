"""Which code a config read from disk may make runner run. A checkpoint's stored config and a run
directory's record of its command line are data: runner builds a ``_target_`` they name only when the
person running it names it too, through runner's own configs, the config folders on their command
line's ``hydra.searchpath`` or the command line itself. Otherwise one line names the target and how
to allow it; nothing is imported or called first.

``instantiate`` resolves the config it is given once more: a value that still holds ``${`` after runner
resolved it (an escaped ``\\${oc.create:{_target_: ...}}`` in a file) would become a new ``_target_``
there. ``check_config_from_file`` is the one check for a config a file made, on the config exactly as
it is built: resolved once, no interpolation left, every ``_target_`` named by this machine's user."""

import re
from collections.abc import Iterable, Iterator, Mapping, Set
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from runner.config.errors import ConfigError
from runner.config.typed import PLANNED_VALUES

# Left as written when a config is resolved and filled in, as a whole value, where the scheduler is
# built (training/schedules.py): instantiate never resolves them.
PLANNED_PLACEHOLDERS = frozenset("${" + name + "}" for name in PLANNED_VALUES)


def targets_in(value: Any, key: str = "") -> Iterator[tuple[str, str]]:
    """``(dotted key of the config, target)`` for every ``_target_`` anywhere in ``value``."""
    if isinstance(value, Mapping):
        for name, item in value.items():
            inner = f"{key}.{name}" if key else str(name)
            if name == "_target_":
                yield inner, str(item)
            else:
                yield from targets_in(item, inner)
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from targets_in(item, f"{key}.{index}" if key else str(index))


@cache
def folder_targets(folder: Path) -> frozenset[str]:
    """The targets the YAML files under a config folder name."""
    found = set()
    for path in sorted([*folder.rglob("*.yaml"), *folder.rglob("*.yml")]):
        try:
            found.update(target for _, target in targets_in(yaml.safe_load(path.read_text())))
        except (OSError, yaml.YAMLError):
            continue  # a file Hydra could not read names nothing
    return frozenset(found)


def searchpath_folders(entries: Iterable[str]) -> list[Path]:
    """The folders of ``hydra.searchpath`` entries: ``file://`` paths, and ``pkg://`` packages that
    are installed as plain folders."""
    folders = []
    for entry in entries:
        if entry.startswith("file://"):
            folders.append(Path(entry.removeprefix("file://")).expanduser().resolve())
        elif entry.startswith("pkg://"):
            from importlib.resources import files

            try:
                folders.append(Path(str(files(entry.removeprefix("pkg://").replace("/", ".")))))
            except (ImportError, TypeError, ValueError):
                continue
    return [folder for folder in folders if folder.is_dir()]


def interpolations_in(value: Any, key: str = "") -> Iterator[tuple[str, str]]:
    """``(dotted key of the config, text)`` for every key or string value in ``value`` that holds
    ``${``, escaped or not: resolved once already, it would be resolved again by ``instantiate``."""
    if isinstance(value, Mapping):
        for name, item in value.items():
            inner = f"{key}.{name}" if key else str(name)
            if "${" in str(name):
                yield inner, str(name)
            yield from interpolations_in(item, inner)
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from interpolations_in(item, f"{key}.{index}" if key else str(index))
    elif isinstance(value, str) and "${" in value:
        yield key, value


# ``${`` after an even number of backslashes (none included): OmegaConf resolves it; after an odd
# number it is escaped, a literal ``${``.
LIVE_INTERPOLATION = re.compile(r"(?<!\\)(?:\\\\)*\$\{")


def is_live_interpolation(text: str) -> bool:
    """Whether resolving ``text`` calls a resolver or reads another value (``\\${`` is escaped)."""
    return bool(LIVE_INTERPOLATION.search(text))


def is_planned_value(key: str, text: str) -> bool:
    """A scheduler setting that is exactly ``${total_steps}`` or ``${steps_per_epoch}``."""
    section, _, name = key.partition(".")
    return section == "scheduler" and "." not in name and text in PLANNED_PLACEHOLDERS


def one_line(text: str) -> str:
    """Text from a file as a message quotes it: on one line, not too long."""
    flat = "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)
    return flat if len(flat) <= 200 else flat[:200] + "..."


def check_saved_resolved(config: Mapping[str, Any], where: str) -> None:
    """A checkpoint's config is saved resolved (the scheduler's planned values aside): one that still
    holds an interpolation was edited, and runner resolves none of it, before anything else: a
    resolver may read this machine's environment, and values that name each other many times over
    grow without bound (eight names of eight, eleven deep, are 8**11 values)."""
    for key, text in interpolations_in(config):
        if is_live_interpolation(text) and not is_planned_value(key, text):
            raise ConfigError(
                f"{where} holds {one_line(key)}={one_line(text)}, an interpolation; runner saves a run's "
                "config resolved, so this one was added to the file, and runner resolves nothing in it "
                "(it may read this machine's environment, build code a file names or grow without "
                "bound): remove it from the file"
            )


def check_config_from_file(config: Mapping[str, Any], trusted: Set[str], where: str, allow: str) -> None:
    """The one check for a config a file made (a checkpoint's, a run directory's record composed again),
    given as it will be built: resolved once, plain values (``as_dict(typed_config(...))``). A value
    that still holds an interpolation is refused (``instantiate`` would resolve it again, and
    ``${oc.create:...}`` makes a ``_target_``), then every ``_target_`` is checked against ``trusted``
    (see ``check_named`` for ``where`` and ``allow``). Nothing is imported or called."""
    for key, text in interpolations_in(config):
        if not is_planned_value(key, text):
            raise ConfigError(
                f"{where} holds {one_line(key)}={one_line(text)}, which is still an interpolation once "
                "resolved (an escaped \\${...}): building the config would resolve it again, and so run "
                "code a file names (${oc.create:{_target_: ...}}); runner builds nothing from it: remove "
                "it from the file it came from"
            )
    check_named(targets_in(config), trusted, where, allow)


def check_named(found: Iterable[tuple[str, str]], trusted: Set[str], where: str, allow: str) -> None:
    """Refuse ``found`` targets that are not ``trusted``. ``where`` says what named them; ``allow``
    how to allow them, with ``{targets}`` for the targets (comma-separated) and ``{first}`` for the
    first ``key=target``."""
    strangers = [(one_line(key), one_line(target)) for key, target in found if target not in trusted]
    if strangers:
        named = ", ".join(f"{key}={target}" for key, target in strangers)
        targets = ",".join(dict.fromkeys(target for _, target in strangers))
        raise ConfigError(
            f"{where} names {named}, which neither runner's configs nor this command line name; runner "
            "does not import or call code named by a file. If you trust it, "
            + allow.format(targets=targets, first="=".join(strangers[0]))
        )
