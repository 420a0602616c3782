"""The closest of a callable's arguments to a name it does not take: ``learning_rate`` -> ``lr``."""

import difflib
import inspect
import re
from collections.abc import Callable, Iterable
from typing import Any


def initials(name: str) -> str:
    return "".join(word[0] for word in name.split("_") if word)


def closest_name(name: str, candidates: Iterable[str]) -> str | None:
    """An abbreviation either way (``lr`` for ``learning_rate``), else a near spelling; None if none."""
    names = [candidate for candidate in dict.fromkeys(candidates) if candidate not in ("self", name)]
    for candidate in names:
        if initials(name) == candidate or initials(candidate) == name:
            return candidate
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.7)
    return close[0] if close else None


def argument_names(target: Callable[..., Any]) -> list[str]:
    """The keyword arguments ``target`` takes by name (none where it has no signature)."""
    try:
        parameters = inspect.signature(target).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in parameters if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.POSITIONAL_ONLY)]


def unexpected_argument_hint(key: str, target: str, error: BaseException) -> str:
    """``; did you mean optimizer.lr ...?`` for the TypeError of a ``_target_`` called with a keyword
    argument it does not take (the target was imported to be called: looking it up runs nothing new)."""
    found = re.search(r"unexpected keyword argument '(\w+)'", str(error))
    if found is None or not isinstance(error, TypeError):
        return ""
    import pydoc  # only a failed call looks the target up again: a run that starts never imports it

    closest = closest_name(found[1], argument_names(pydoc.locate(target)))
    return f"; {key}.{closest} is its argument closest to {found[1]}" if closest else ""
