"""How a command ends on a mistake the user can fix: one line on stderr, exit status 2."""

import sys
from typing import NoReturn

from runner.config.errors import UserError


def exit_with(error: UserError) -> NoReturn:
    print(f"runner: error: {error}", file=sys.stderr)
    raise SystemExit(2) from None
