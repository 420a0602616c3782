"""Hydra's ``--help`` as runner shows it: the groups' options without the typed schemas and a project's
defaults, which are not options to choose."""

import contextlib
import io
import sys
from collections.abc import Callable
from typing import Any

# Config store entries that data configs build on, not options.
SCHEMA_OPTIONS = {"data": {"base_data", "data_schema"}}


def help_without_schemas(main: Callable[[], Any]) -> Any:
    """Hydra's ``--help``, less the typed schemas it lists among the groups' options (``base_data``,
    which data configs build on: not one to choose). Hydra lists every option its config store holds."""
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            return main()
    finally:
        hidden = {f"{group}: ": names for group, names in SCHEMA_OPTIONS.items()}

        def listed(line: str) -> str:
            for start, names in hidden.items():
                if line.startswith(start):
                    options = [option for option in line[len(start) :].split(", ") if option not in names]
                    return start + ", ".join(options)
            return line

        lines = printed.getvalue().splitlines(True)
        shown = [line for line in lines if not line.startswith("runner_project: ")]  # a project's defaults
        sys.stdout.write("".join(listed(line.rstrip("\n")) + "\n" for line in shown))
