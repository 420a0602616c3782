"""How a command ends on a mistake the user can fix: one line on stderr, exit status 2. Under the
Python API (``runner.train``) the mistake is raised instead, as the ``UserError`` it is."""

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import NoReturn

from runner.config.errors import UserError

raising = ContextVar("raising", default=False)


def exit_with(error: UserError) -> NoReturn:
    if raising.get():
        raise error
    print(f"runner: error: {error}", file=sys.stderr)
    raise SystemExit(2) from None


@contextmanager
def raise_user_errors() -> Iterator[None]:
    """Within it, a mistake the user can fix is raised, not printed with an exit."""
    token = raising.set(True)
    try:
        yield
    finally:
        raising.reset(token)
