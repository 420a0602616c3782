"""``runner doctor``: the debugging checklist as a command.

When training breaks, check the simple engineering problems first, in the checklist's order: the
checks are listed below in that order, each once, and numbered by their place. Every check runs where
it can: a failure does not stop the later ones, and a check that cannot run (the loss raises on a
mistake an earlier check named) is skipped.
"""

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass

from runner.tools.doctor.data_checks import check_batch, check_devices, check_loss, check_shapes
from runner.tools.doctor.overfit_check import check_overfit
from runner.tools.doctor.probe import FAIL, PASS, SKIP, Finding, Probe, Setup
from runner.tools.doctor.training_checks import check_gradients, check_update, check_validation

__all__ = ["FAIL", "PASS", "SKIP", "CheckResult", "Setup", "format_table", "run_checks", "to_json"]


@dataclass(frozen=True)
class Check:
    name: str
    run: Callable[[Probe], Finding]
    needs_batch: bool = True  # skipped when no batch could be loaded (check 1 failed)


CHECKS = (
    Check("one batch loads", check_batch, needs_batch=False),
    Check("shapes and dtypes fit model and loss", check_shapes),
    Check("model and data on the same device", check_devices),
    Check("loss is finite", check_loss),
    Check("gradients exist and are not exploding", check_gradients),
    Check("parameters change after optimizer.step()", check_update),
    Check("validation runs in eval() without gradients", check_validation, needs_batch=False),
    Check("sanity run: overfit one batch", check_overfit),
)


@dataclass
class CheckResult:
    number: int
    check: str
    status: str
    found: str
    advice: str = ""


def run_checks(setup: Setup) -> list[CheckResult]:
    probe = Probe(setup)
    results = []
    for number, check in enumerate(CHECKS, start=1):
        if check.needs_batch and probe.batch is None:
            results.append(CheckResult(number, check.name, SKIP, "needs a batch (check 1)"))
            continue
        try:
            finding = check.run(probe)
        except Exception as error:
            reason = f"could not run: {type(error).__name__}: {str(error).splitlines()[0]}"
            results.append(CheckResult(number, check.name, SKIP, reason))
            continue
        results.append(CheckResult(number, check.name, finding.status, finding.found, finding.advice))
    return results


def format_table(results: list[CheckResult]) -> str:
    lines = []
    for result in results:
        lines.append(f"{result.number}. [{result.status:>4}] {result.check}: {result.found}")
        if result.advice and result.status != PASS:
            lines.append(f"   what to do: {result.advice}")
    lines.append("")
    lines.append(summary_line(results))
    return "\n".join(lines)


def summary_line(results: list[CheckResult]) -> str:
    """The last line: "all checks passed" only when every check ran and passed; a skipped one is counted."""
    counts = {status: sum(r.status == status for r in results) for status in (FAIL, PASS, SKIP)}
    if counts[PASS] == len(results):
        return "all checks passed"
    parts = [f"{counts[PASS]} passed"] + ([f"{counts[SKIP]} skipped"] if counts[SKIP] else [])
    if counts[FAIL]:
        return f"{counts[FAIL]} check(s) failed, " + ", ".join(parts)
    return ", ".join(parts)


def to_json(results: list[CheckResult]) -> str:
    return json.dumps([asdict(result) for result in results], indent=2)
