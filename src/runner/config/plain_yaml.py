"""YAML read from a run's or a sweep's folder (``.hydra/*.yaml``, ``run.yaml``): plain data, with work
bounded by the file's size. An alias repeats a whole subtree for a few bytes (nine levels of ten make a
1 KB file of 10**9 values to whoever walks it), so a record that holds one is refused: neither runner
nor Hydra writes aliases. Nesting deeper than any record holds, and a file larger than any record, are
refused too, each in words a one-line error can carry."""

from pathlib import Path
from typing import Any

import yaml

MAX_BYTES = 1 << 20  # records are a few KB; libyaml read 120 KB a second on this busy 2-core machine
MAX_DEPTH = 100  # runner's configs nest about six levels
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's, where PyYAML was built with it
OPENS, CLOSES = (
    (yaml.SequenceStartEvent, yaml.MappingStartEvent),
    (yaml.SequenceEndEvent, yaml.MappingEndEvent),
)


class UnreadableRecord(ValueError):
    """A record that is not plain YAML data of a readable size; the message says why, in a few words."""


def load_plain(text: str) -> Any:
    """``text`` as plain YAML data; ``UnreadableRecord`` where it holds an alias, nests too deeply or is
    not YAML. Its parser's events are checked first (a flat stream, however deep the text nests), so
    nothing is composed, repeated or recursed into before the text is known to be plain."""
    try:
        depth = 0
        for event in yaml.parse(text, Loader=LOADER):
            if isinstance(event, yaml.AliasEvent):
                raise UnreadableRecord(
                    f"it holds a YAML alias (*{event.anchor}), which no record runner or Hydra writes"
                )
            depth += isinstance(event, OPENS) - isinstance(event, CLOSES)
            if depth > MAX_DEPTH:
                raise UnreadableRecord(f"it is nested too deeply, more than {MAX_DEPTH} levels")
        return yaml.load(text, Loader=LOADER)
    except yaml.YAMLError as error:
        if "increasing flow level" in str(error) or "nesting" in str(error):  # libyaml's own limit
            raise UnreadableRecord(f"it is nested too deeply, more than {MAX_DEPTH} levels") from None
        raise UnreadableRecord(f"it is not YAML ({str(error).splitlines()[0]})") from None


def read_plain(path: Path) -> Any:
    """A record file's YAML data. ``UnreadableRecord`` for a file that is not a plain one (a FIFO would
    block the read, a device never end it), larger than ``MAX_BYTES``, not UTF-8, or not plain YAML;
    ``OSError`` as reading raises it."""
    if not path.is_file():
        raise UnreadableRecord("it is not a plain file")
    with open(path, "rb") as handle:
        data = handle.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise UnreadableRecord(f"it is larger than {MAX_BYTES >> 20} MiB, more than any record runner writes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise UnreadableRecord("it is not UTF-8 text") from None
    return load_plain(text)
