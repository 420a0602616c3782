"""``train resume=DIR``: the command line that continues a run, rebuilt from the run directory's
record of its own command line, which is data: what it would make runner import or call is refused
unless this command line names it; a run started in a project resumes from that project only. Where
the record names an option of a config folder this command line does not have (a project's, or one on
``hydra.searchpath``), the refusal names that folder, read from Hydra's record of the run only to be
shown, never searched or loaded."""

import os
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from runner.cli.arguments import CommandLine, parse_overrides, reapplied, resumed, value_text
from runner.cli.hydra.hydra_app import options_of
from runner.config.errors import ConfigError
from runner.config.project import active_project
from runner.config.trust import check_named, interpolations_in, is_live_interpolation, one_line, targets_in

if TYPE_CHECKING:  # importing it loads torch: the run does that only once Hydra has composed
    from runner.checkpoint.locate import Found

OWN_PROVIDERS = ("hydra", "main", "schema")  # Hydra's own configs, runner's conf/, the config store


def with_resume(command_line: CommandLine, trusted: set[str]) -> tuple[CommandLine, "Found | None"]:
    """The command line that continues the run ``resume=`` names, and its checkpoint, found and
    loaded here once. ``resume=auto`` looks in the run's own directory, once Hydra has made it.
    ``trusted``: the targets this command line names."""
    request = command_line.last("resume")
    if request is None or value_text(request) in ("auto", "null"):
        return command_line, None
    from runner.checkpoint.locate import locate_checkpoint, original_overrides

    found = locate_checkpoint(value_text(request), Path.cwd() / "outputs")
    check_writable(found.run_dir, value_text(request))
    project = active_project()
    check_same_project(found.run_dir, value_text(request), project.conf if project is not None else None)
    original = original_overrides(found.run_dir)
    check_stored_overrides(original, command_line, found.run_dir, trusted)
    stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
    found = replace(found, reapplied=tuple(reapplied(command_line, original)))
    return resumed(command_line, str(found.path), str(found.run_dir), original, stamp), found


def check_writable(run_dir: Path, request: str) -> None:
    """A resume writes into the run directory (checkpoints, events, its log and Hydra's record): a
    read-only one is refused before Hydra tries to open the log file there."""
    places = [run_dir, *(run_dir / name for name in (".hydra", "checkpoints", "train.log", "run.yaml"))]
    read_only = next((path for path in places if path.exists() and not os.access(path, os.W_OK)), None)
    if read_only is not None:
        raise ConfigError(
            f"resume={request}: {read_only} is read-only, and a resume writes its checkpoints and logs into "
            f"the run directory; make it writable (chmod -R u+w {run_dir}) or resume a copy of the run"
        )


def check_stored_overrides(
    original: list[str], command_line: CommandLine, run_dir: Path, trusted: set[str]
) -> None:
    """A run directory's record of its command line is data: what it would make runner import or
    call (a ``_target_``, a config folder, a config file outside the config folders, Hydra's own
    settings) is refused unless this command line names it. The overrides given now replace theirs."""
    record = run_dir / ".hydra" / "overrides.yaml"
    given = set(command_line.keys())
    stored = [override for override in parse_overrides(original) if override.key_or_group not in given]
    named = []
    for override in stored:
        key, value = override.key_or_group.lstrip("+~"), override.value()
        if key == "hydra.searchpath":
            raise ConfigError(
                f"resume={run_dir}: the run was started with {override.input_line}; runner takes no config "
                "folders from a run directory: give it again on this command line"
            )
        # A config group's options: only those of the config folders this command line names (Hydra
        # would load any YAML file a path names, ``model=../../x`` or in a list).
        group = key.split("@")[0]
        options = options_of(group, command_line) if "." not in group else []
        chosen = value if isinstance(value, list) else [value]
        unknown_option = bool(options) and any(not isinstance(o, str) or o not in options for o in chosen)
        selects_file = "." not in key and any(
            isinstance(o, str) and (".." in o or o.startswith("/")) for o in chosen
        )
        # A package puts an option anywhere, Hydra's own settings too (``+scheduler@hydra.callbacks.x=``:
        # Hydra builds its callbacks before runner sees the config).
        package = (override.package or "").removeprefix("_global_").lstrip(".")
        if key.startswith("hydra") or package.startswith("hydra") or unknown_option or selects_file:
            hint = folder_hint(run_dir, group, str(chosen[0])) if unknown_option and not selects_file else ""
            raise ConfigError(
                f"resume={run_dir}: {record} holds {override.input_line}, which runner does not re-apply "
                "from a run directory (it names Hydra settings or a config file outside the config "
                f"folders){hint or '; give it on this command line if you mean it'}"
            )
        live = [(inner, text) for inner, text in interpolations_in(value, key) if is_live_interpolation(text)]
        if live:  # an escaped one (\${...}) is a plain string here: check_config_from_file sees it built
            raise ConfigError(
                f"resume={run_dir}: {record} holds {one_line(override.input_line)}, an interpolation, which "
                "runner does not resolve from a run directory (it may read this machine's environment or "
                "grow without bound); give it on this command line if you mean it"
            )
        named += [(key, str(value))] if key.endswith("_target_") else list(targets_in(value, key))
    check_named(named, trusted, f"resume={run_dir}: {record}",
                "give {first} on this command line")  # fmt: skip


def recorded_sources(run_dir: Path) -> list:
    """The config sources Hydra's record of the run lists (empty where it has none it can read)."""
    try:
        record = yaml.safe_load((run_dir / ".hydra" / "hydra.yaml").read_text())
        sources = record["hydra"]["runtime"]["config_sources"]
    except (OSError, yaml.YAMLError, KeyError, TypeError):
        return []
    return [source for source in sources if isinstance(source, dict)] if isinstance(sources, list) else []


def check_same_project(run_dir: Path, request: str, project_conf: Path | None) -> None:
    """A run started in a project resumes from that project (its code and configs, which a run directory
    never names): from elsewhere, it is refused by naming the project's folder."""
    for source in recorded_sources(run_dir):
        folder = Path(str(source.get("path", "")))
        if source.get("provider") == "runner-project" and folder != project_conf:
            raise ConfigError(
                f"resume={request}: the run was started in the project {folder.parent} (its config folder "
                f"{folder}), and this command runs outside it: run it from {folder.parent}"
            )


def folder_hint(run_dir: Path, group: str, option: str) -> str:
    """How to give the run's config folder again: from its project's folder, or on hydra.searchpath;
    empty where the record does not say (or names no folder that holds the option now)."""
    for source in recorded_sources(run_dir):
        if source.get("provider") in OWN_PROVIDERS:
            continue
        folder = Path(str(source.get("path", "")))
        if source.get("schema") != "file" or not (folder / group / f"{option}.yaml").is_file():
            continue
        if source.get("provider") == "runner-project":
            return (f"; {group}={option} is in the config folder {folder} of the project the run was started "
                    f"in: run this command from that project's folder ({folder.parent})")  # fmt: skip
        return (f"; {group}={option} is in the config folder {folder}, which a run directory never names: "
                f"give hydra.searchpath=[file://{folder}] on this command line")  # fmt: skip
    return ""
