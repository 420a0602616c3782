"""Which code a config read from disk may make runner run. A checkpoint's stored config and a run
directory's record of its command line are data: runner builds a ``_target_`` they name only when the
person running it names it too, through runner's own configs, the config folders on their command
line's ``hydra.searchpath`` or the command line itself. Otherwise one line names the target and how
to allow it; nothing is imported or called first."""

from collections.abc import Iterable, Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from runner.config.errors import ConfigError


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


def check_named(found: Iterable[tuple[str, str]], trusted: set[str], where: str, allow: str) -> None:
    """Refuse ``found`` targets that are not ``trusted``. ``where`` says what named them; ``allow``
    how to allow them, with ``{targets}`` for the targets (comma-separated) and ``{first}`` for the
    first ``key=target``."""
    strangers = [(key, target) for key, target in found if target not in trusted]
    if strangers:
        named = ", ".join(f"{key}={target}" for key, target in strangers)
        targets = ",".join(dict.fromkeys(target for _, target in strangers))
        raise ConfigError(
            f"{where} names {named}, which neither runner's configs nor this command line name; runner "
            "does not import or call code named by a file. If you trust it, "
            + allow.format(targets=targets, first="=".join(strangers[0]))
        )
