"""``python -m runner verify-resume [--steps N] [--kill-at K] [--nproc-per-node N] [key=value ...]``:
whether the configured setup resumes exactly (the work is in ``runner.tools.verify_resume``)."""

import shutil
import sys
import tempfile
from pathlib import Path

from runner.cli.exits import exit_with
from runner.config.errors import ConfigError

HELP = """usage: python -m runner verify-resume [--steps N] [--kill-at K] [--nproc-per-node N] [key=value ...]

Trains the configured setup (the same overrides as train) for N steps (default 6) without stopping, then
again SIGKILLed at step K (default: a random step in [2, N-1]) after the checkpoint of the step before,
and resumed; compares every step's loss, the final weights, optimizer, scheduler and random states.
Prints "resumes exactly" and exits 0, or exits 1 naming the first differing loss and state.
--nproc-per-node N runs both under torchrun with N processes. Both runs go to a temporary folder,
removed when the setup resumes exactly, kept otherwise."""
FLAGS = ("--steps", "--kill-at", "--nproc-per-node")


def parse(arguments: list[str]) -> tuple[dict[str, int], list[str]]:
    """The flags (``--steps 6`` or ``--steps=6``) as whole numbers, and the overrides."""
    values, overrides, rest = {}, [], list(arguments)
    while rest:
        argument = rest.pop(0)
        flag, equals, value = argument.partition("=")
        if flag not in FLAGS:
            if argument.startswith("-"):
                raise ConfigError(f"verify-resume: unknown flag {argument}; the flags are {', '.join(FLAGS)}")
            overrides.append(argument)
            continue
        if not equals:
            value = rest.pop(0) if rest else ""
        if not value.isdigit() or int(value) < 1:
            raise ConfigError(
                f"verify-resume: {flag} {value!r} is not allowed; {flag} takes a whole number >= 1"
            )
        values[flag] = int(value)
    return values, overrides


def main_verify_resume(arguments: list[str]) -> None:
    if "-h" in arguments or "--help" in arguments:
        print(HELP)
        raise SystemExit(0)
    from runner.tools.verify_resume import runner_launcher, verify_resume  # loads torch

    try:
        values, overrides = parse(arguments)
        steps, kill_at = values.get("--steps", 6), values.get("--kill-at")
        if steps < 3 or (kill_at is not None and not 2 <= kill_at < steps):
            raise ConfigError(
                f"verify-resume: --steps {steps}" + (f" --kill-at {kill_at}" if kill_at else "")
                + " is not allowed; --steps is at least 3 and --kill-at a step in [2, steps - 1] (there "
                "must be a checkpoint before it and a step after it)"
            )  # fmt: skip
    except ConfigError as error:
        exit_with(error)
    work_dir = Path(tempfile.mkdtemp(prefix="runner-verify-resume-"))
    launcher = runner_launcher(values.get("--nproc-per-node", 1))
    verdict = verify_resume(overrides, steps, kill_at, launcher, work_dir)
    if verdict.exact:
        shutil.rmtree(work_dir, ignore_errors=True)
        print(verdict.lines[0])
        raise SystemExit(0)
    print(f"runner: verify-resume: {verdict.lines[0]}", file=sys.stderr)
    for line in verdict.lines[1:]:
        print(line, file=sys.stderr)
    raise SystemExit(verdict.status)
