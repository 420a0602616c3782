"""A key the chosen ``_target_`` does not take (``optimizer.learning_rate``): the closest of its
arguments (``optimizer.lr``), from the target's signature and its config's keys. The target is one a
config folder names (runner's or the project's), so importing it runs nothing the run would not."""

import contextlib
from pathlib import Path

import yaml
from hydra.core.override_parser.types import Override
from hydra.utils import get_object

from runner.config.closest import argument_names, closest_name
from runner.config.project import active_project


def option_file(group: str, folders: list[Path], given: Override | None) -> Path | None:
    """The file of the option ``group`` takes: given on the command line, the project's default, or
    runner's (its ``config.yaml``, the first folder's)."""
    option = given.value() if given is not None else None
    project = active_project()
    if option is None and project is not None:
        option = project.defaults.get(group)
    if option is None:
        listed = yaml.safe_load((folders[0] / "config.yaml").read_text()).get("defaults", [])
        option = next((entry[group] for entry in listed if isinstance(entry, dict) and group in entry), None)
    if not isinstance(option, str):
        return None
    found = [folder / group / f"{option}.yaml" for folder in folders]
    return next((path for path in found if path.is_file()), None)


def closest_argument(
    name: str, group: str, folders: list[Path], given: Override | None
) -> tuple[str, str] | None:
    """The argument of the chosen option's ``_target_`` closest to ``name`` (an abbreviation either
    way, ``learning_rate`` for ``lr``, or a near spelling), and the target; None where none is close."""
    option = option_file(group, folders, given) if "." not in group else None
    if option is None:
        return None
    try:
        content = yaml.safe_load(option.read_text())
    except (OSError, yaml.YAMLError):
        return None
    if not isinstance(content, dict) or not isinstance(content.get("_target_"), str):
        return None
    target = content["_target_"]
    candidates = [str(key) for key in content if not str(key).startswith("_") and key != "defaults"]
    with contextlib.suppress(Exception):  # a target that cannot be imported here: its config's keys
        candidates += argument_names(get_object(target))
    closest = closest_name(name, candidates)
    return (closest, target) if closest else None
