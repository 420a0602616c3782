"""Which config folder a resumed run's option came from, to name it when this command line does not
have it: read from Hydra's record in the run directory only to be shown, never searched or loaded."""

from pathlib import Path

import yaml

from runner.config.errors import ConfigError

OWN_PROVIDERS = ("hydra", "main", "schema")  # Hydra's own configs, runner's conf/, the config store


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
