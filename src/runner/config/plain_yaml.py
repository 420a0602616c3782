"""YAML read from a run's or a sweep's folder (``.hydra/*.yaml``, ``run.yaml``): plain data, with work
bounded by the file's size. An alias repeats a whole subtree for a few bytes (nine levels of ten make a
1 KB file of 10**9 values to whoever walks it), so a record that holds one is refused: neither runner
nor Hydra writes aliases. Nesting deeper than any record holds, and a file larger than any record, are
refused too, each in words a one-line error can carry."""

from pathlib import Path
from typing import Any

import yaml

MAX_BYTES = 4 << 20  # a run's records are a few KB; PyYAML reads about 1 MB a second here
MAX_DEPTH = 100  # runner's configs nest about six levels


class UnreadableRecord(ValueError):
    """A record that is not plain YAML data of a readable size; the message says why, in a few words."""


class _PlainLoader(yaml.SafeLoader):
    """PyYAML's safe loader that refuses aliases and deep nesting while it composes, before any
    subtree is repeated or recursed into."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            anchor = self.peek_event().anchor
            raise UnreadableRecord(
                f"it holds a YAML alias (*{anchor}), which no record runner or Hydra writes"
            )
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise UnreadableRecord(f"it is nested too deeply, more than {MAX_DEPTH} levels")
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def load_plain(text: str) -> Any:
    """``text`` as plain YAML data; ``UnreadableRecord`` where it holds an alias or nests too deeply,
    ``UnreadableRecord`` too for what PyYAML cannot parse."""
    try:
        loader = _PlainLoader(text)  # its reader refuses control characters here already
    except yaml.YAMLError as error:
        raise UnreadableRecord(f"it is not YAML ({str(error).splitlines()[0]})") from None
    try:
        return loader.get_single_data()
    except yaml.YAMLError as error:
        raise UnreadableRecord(f"it is not YAML ({str(error).splitlines()[0]})") from None
    except RecursionError:
        raise UnreadableRecord(f"it is nested too deeply, more than {MAX_DEPTH} levels") from None
    finally:
        loader.dispose()


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
