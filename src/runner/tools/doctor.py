"""``runner doctor``: the debugging checklist as a command.

When training breaks, check the simple engineering problems first, in the checklist's order (the
checks are in ``doctor_checks.py``). Every check runs where it can: a failure does not stop the later
ones, and a check that cannot run (the loss raises on a mistake an earlier check named) is skipped.
"""

import json
from dataclasses import asdict, dataclass

from runner.tools.doctor_checks import CHECKS, FAIL, PASS, SKIP, Probe, Setup

__all__ = ["FAIL", "PASS", "SKIP", "CheckResult", "Setup", "format_table", "run_checks", "to_json"]


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
    for check in CHECKS:
        if check.needs_batch and probe.inputs is None:
            results.append(CheckResult(check.number, check.name, SKIP, "needs a batch (check 1)"))
            continue
        try:
            finding = check.run(probe)
        except Exception as error:
            reason = f"could not run: {type(error).__name__}: {str(error).splitlines()[0]}"
            results.append(CheckResult(check.number, check.name, SKIP, reason))
            continue
        results.append(CheckResult(check.number, check.name, finding.status, finding.found, finding.advice))
    return results


def format_table(results: list[CheckResult]) -> str:
    lines = []
    for result in results:
        lines.append(f"{result.number}. [{result.status:>4}] {result.check}: {result.found}")
        if result.advice and result.status != PASS:
            lines.append(f"   what to do: {result.advice}")
    failed = [r for r in results if r.status == FAIL]
    lines.append("")
    lines.append(f"{len(failed)} check(s) failed" if failed else "all checks passed")
    return "\n".join(lines)


def to_json(results: list[CheckResult]) -> str:
    return json.dumps([asdict(result) for result in results], indent=2)
