"""Checks of the built-in data sets' arguments: a value that would leave a split empty or make no data is
refused by the function that takes it (and named by key when the run builds it)."""

from typing import Any


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_counts(**counts: Any) -> None:
    for name, value in counts.items():
        if not (is_number(value) and isinstance(value, int) and value >= 1):
            raise ValueError(f"{name}={value} is not allowed; {name} must be an integer >= 1")


def check_fraction(val_fraction: Any) -> None:
    """The held-out share: some data must be left on each side."""
    if not (is_number(val_fraction) and 0 < val_fraction < 1):
        raise ValueError(f"val_fraction={val_fraction} is not allowed; it must be a number in (0, 1)")
