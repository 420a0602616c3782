"""The command line, parsed once into one object. Rewrites (resume, torchrun) are pure functions over
it that return a new one; nothing here reads or writes files or ``sys.argv``."""

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.errors import HydraException

from runner.config.errors import ConfigError

# Command-line flags of Hydra's that take the next argument as their value.
HYDRA_FLAGS_WITH_VALUE = {
    "-c", "--cfg", "-p", "--package", "-cp", "--config-path",
    "-cn", "--config-name", "-cd", "--config-dir", "--experimental-rerun", "-i", "--info",
}  # fmt: skip
# Hydra's --experimental-rerun unpickles the file it names (a pickle runs code): not taken.
REFUSED_FLAGS = {"--experimental-rerun"}
HYDRA_FLAGS = {
    *HYDRA_FLAGS_WITH_VALUE, "-h", "--help", "--hydra-help", "--version", "--resolve", "-r", "--run",
    "-m", "--multirun", "-sc", "--shell-completion",
}  # fmt: skip
CONFIG_NAME_FLAGS = ("-cn", "--config-name")
# Overrides whose value is a path: a sweep job's directory holds ``=`` and ``,`` in its name
# (``003_optimizer.lr=0.01,seed=1``), which Hydra's syntax reads as its own outside quotes.
PATH_KEYS = ("resume",)
PLAIN = re.compile(r"[A-Za-z0-9_./\-+@%:]*")


def quoted(value: str) -> str:
    """``value`` as an override's value Hydra reads back as it is: quoted where it holds characters of
    Hydra's syntax (a backslash escaped only before a quote, as Hydra reads it)."""
    if PLAIN.fullmatch(value):
        return value
    escaped = re.sub(r"(\\*)('|$)", lambda found: found[1] * 2 + ("\\'" if found[2] else ""), value)
    return f"'{escaped}'"


def path_override(text: str) -> str:
    """``resume=<sweep dir>/003_optimizer.lr=0.01,seed=1`` as a shell completes it, quoted for Hydra."""
    key, given, value = text.partition("=")
    if key not in PATH_KEYS or not given or value[:1] in ("'", '"') or not re.search(r"[=,]", value):
        return text
    return f"{key}={quoted(value)}"


def parse_overrides(texts: Sequence[str]) -> tuple[Override, ...]:
    """Hydra's own override parser; a syntax error is one line naming the override."""
    parser = OverridesParser.create()
    parsed = []
    for text in texts:
        try:
            parsed += parser.parse_overrides([text])
        except HydraException as error:
            reason = " ".join(line.strip() for line in str(error).splitlines() if line.strip())
            raise ConfigError(f"{text}: not a valid override ({reason})") from None
    return tuple(parsed)


def outside_flag_values(arguments: Iterable[str]) -> Iterator[str]:
    """The arguments, less the values of Hydra's flags that take one (``job`` of ``--cfg job``)."""
    skip_next = False
    for argument in arguments:
        if skip_next:
            skip_next = False
            continue
        skip_next = argument in HYDRA_FLAGS_WITH_VALUE
        yield argument


def override_texts(arguments: Sequence[str]) -> list[str]:
    """The ``key=value`` overrides (and ``~key`` deletions) among Hydra's command-line arguments."""
    return [argument for argument in outside_flag_values(arguments)
            if not argument.startswith("-") and ("=" in argument or argument.startswith("~"))]  # fmt: skip


@dataclass(frozen=True)
class CommandLine:
    """A command's arguments (Hydra's flags and ``key=value`` overrides), with the overrides parsed."""

    arguments: tuple[str, ...]
    overrides: tuple[Override, ...]

    @classmethod
    def parse(cls, arguments: Iterable[str]) -> "CommandLine":
        arguments = tuple(path_override(argument) for argument in arguments)
        return cls(arguments, parse_overrides(override_texts(arguments)))

    @property
    def sweep(self) -> bool:
        return "-m" in self.arguments or "--multirun" in self.arguments

    @property
    def custom_primary_config(self) -> bool:
        return any(a in CONFIG_NAME_FLAGS or a.startswith("--config-name=") for a in self.arguments)

    def has_flag(self, flag: str) -> bool:
        return flag in self.arguments

    def unknown_flags(self, known: Iterable[str] = ()) -> list[str]:
        """Flags neither Hydra nor the command knows (``--cfg=job`` counts as ``--cfg``)."""
        known = (HYDRA_FLAGS - REFUSED_FLAGS) | set(known)
        return [argument for argument in outside_flag_values(self.arguments)
                if argument.startswith("-") and argument.split("=", 1)[0] not in known]  # fmt: skip

    def keys(self) -> list[str]:
        return [override.key_or_group for override in self.overrides]

    def last(self, key: str) -> Override | None:
        """The override that decides ``key`` (the last one given)."""
        return next((o for o in reversed(self.overrides) if o.key_or_group == key), None)

    def without(self, *drop: str) -> "CommandLine":
        """Without the given arguments (flags or override texts)."""
        kept = [override for override in self.overrides if override.input_line not in drop]
        return CommandLine(tuple(a for a in self.arguments if a not in drop), tuple(kept))

    def plus(self, *texts: str, first: bool = False) -> "CommandLine":
        """With more overrides, after the given ones (or before them: those given then win). Hydra's
        flags go in front of every override, where its argument parser wants them."""
        added = parse_overrides(texts)
        given = {override.input_line for override in self.overrides}
        flags = [argument for argument in self.arguments if argument not in given]
        overrides = [argument for argument in self.arguments if argument in given]
        if first:
            return CommandLine((*flags, *texts, *overrides), (*added, *self.overrides))
        return CommandLine((*flags, *overrides, *texts), (*self.overrides, *added))


def value_text(override: Override) -> str:
    """An override's value as written (``resume=latest`` -> ``latest``); a quoted one without its quotes."""
    text, value = override.input_line.split("=", 1)[1], override.value()
    return value if isinstance(value, str) and text[:1] in ("'", '"') else text


def reapplied(command_line: CommandLine, original: Sequence[str]) -> list[str]:
    """The run's original overrides that a resume takes again: those the command line does not give."""
    given = set(command_line.keys())
    return [o.input_line for o in parse_overrides(original) if o.key_or_group not in given]


def resumed(
    command_line: CommandLine, checkpoint: str, run_dir: str, original: Sequence[str], stamp: str
) -> CommandLine:
    """``resume=...`` continues the same run: same directory, and the run's original overrides under
    the ones given now. Hydra's record of this invocation goes to ``.hydra/resume-<stamp>``, so the
    original one is kept."""
    requests = [o.input_line for o in command_line.overrides if o.key_or_group == "resume"]
    return (
        command_line.without(*requests)
        .plus(*reapplied(command_line, original), first=True)
        .plus(
            f"resume={quoted(checkpoint)}",
            f"hydra.run.dir={quoted(run_dir)}",
            f"hydra.output_subdir=.hydra/resume-{stamp}",
        )
    )


def for_rank(command_line: CommandLine, run_dir: str, rank: int) -> CommandLine:
    """Under torchrun: every rank gets rank 0's run (or sweep) directory, and only rank 0 keeps Hydra's
    record; the other ranks log warnings and errors to their own file."""
    sweep = command_line.sweep
    rewritten = command_line.plus(f"hydra.{'sweep' if sweep else 'run'}.dir={run_dir}")
    if rank == 0:
        return rewritten
    log_dir = "${hydra.runtime.output_dir}" if sweep else run_dir
    return rewritten.plus(
        "hydra.output_subdir=null",
        f"hydra.job_logging.handlers.file.filename='{log_dir}/train.rank{rank}.log'",
        "hydra.job_logging.root.level=WARNING",
        "hydra.hydra_logging.root.level=WARNING",
    )
