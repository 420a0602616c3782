"""Errors a user can fix, and how a value is quoted back to them."""

from typing import Any


class UserError(ValueError):
    """A problem the user can fix; printed as one line, without a traceback."""


class ConfigError(UserError):
    """A setting that is not allowed or cannot work on this machine."""


def show(value: Any) -> str:
    """A value as the user would type it on the command line."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)
