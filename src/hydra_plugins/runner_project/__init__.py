"""The config folder of the project runner works in (``[tool.runner]`` in its ``pyproject.toml``) on
Hydra's search path, through Hydra's public plugin interface: a run never needs ``hydra.searchpath``
for it. Hydra finds plugins under ``hydra_plugins``; outside runner's processes this adds nothing."""

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin

from runner.config.project import active_project


class ProjectSearchPath(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        project = active_project()
        if project is not None:
            search_path.append(provider="runner-project", path=f"file://{project.conf}")
