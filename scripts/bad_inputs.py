"""Bad-input pass: wrong and adversarial command lines through the real CLI, counted.

    python scripts/bad_inputs.py                     # every case, 2 at a time (a few minutes)
    python scripts/bad_inputs.py --only eval- --only resume- --json /tmp/bad_inputs.json

Each case runs ``python -m runner ...`` in a fresh temporary working directory (so ``outputs/`` lands
there) with its fixtures copied in: a finished tiny run, damaged or malicious checkpoints, a tampered run
directory, text and random files, an unwritable or dangling ``outputs``. A case is judged by its exit
status and output:

- ``one-line``: exit 2, the last non-empty stderr line starts with ``runner: error:``, at most a few
  stderr lines, no traceback (what a refused command should give);
- ``ok``: exit 0 where the command is valid (``ok-no-write`` cases must also write nothing);
- ``diagnosed``: ``doctor`` on a model and data that do not fit: a failing check, exit 1;
- ``traceback``, ``accepted`` (exit 0 where it should be refused), ``another message`` (the right exit,
  without the words ``SAYS`` or ``PRINTS`` in ``cases.py`` give it), ``other`` (e.g. Hydra's multi-line
  message with exit 1), ``timeout``;
- ``CODE-EXEC``: a checkpoint or run directory that names ``pathlib.Path.touch`` (or pickles a call to
  it) made runner create the file it names.

Files written: anything new, changed or removed in the working directory afterwards (path, size,
mtime_ns; ``__pycache__`` ignored), fixture run directories included. A case is fine when its verdict is
the expected one and it wrote nothing it should not have.

The cases, their fixtures and the judging live in ``tests/hostile_inputs/``; the suite runs them
(``tests/test_hostile_inputs.py``: in the test's process where the process is not the point, a sample of
the others as processes). This is the long form: every case as its own process, with totals.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from hostile_inputs.cases import CASES
from hostile_inputs.judging import Result, environment
from hostile_inputs.running import run_case


def build_base_run(root: Path, timeout: float) -> Path:
    """The finished tiny run the fixtures copy (20 optimizer steps of the default experiment)."""
    run_dir = root / "base" / "run"
    command = [sys.executable, "-m", "runner", "train", "trainer.max_steps=20", "trainer.max_epochs=null",
               f"hydra.run.dir={run_dir}"]  # fmt: skip
    env = environment()
    done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0 or not (run_dir / "checkpoints" / "last.pt").is_file():
        sys.exit(f"could not build the fixture run ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return run_dir


def print_result(result: Result) -> None:
    flags = []
    if result.wrote and not result.may_write:
        flags.append(f"WROTE {len(result.wrote)}")
    if result.marker_created:
        flags.append("MARKER CREATED")
    mark = "  " if result.fine else "!!"
    print(f"{mark} {result.id:<38} {result.expect:<11} {result.verdict:<10} rc={result.exit_code!s:<4} "
          f"{result.seconds:5.1f}s {' '.join(flags)} | {result.last_line[:150]}", flush=True)  # fmt: skip


OTHER = ("other", "another message", "refused", "timeout")


def totals(results: list[Result]) -> dict[str, int]:
    def count(verdicts: tuple[str, ...]) -> int:
        return sum(result.verdict in verdicts for result in results)

    return {
        "tried": sum(result.verdict != "skipped" for result in results),
        "one-line errors": count(("one-line",)),
        "one line per rank under torchrun (exit 2)": count(("one line per rank",)),
        "ok as expected": count(("ok",)),
        "doctor diagnosed (failing check, exit 1)": count(("diagnosed",)),
        "sweep job failed, the others ran (exit 1)": count(("job failed",)),
        "tracebacks": count(("traceback",)),
        "accepted wrongly": count(("accepted",)),
        "other (multi-line, other words or exit, valid refused, timeout)": count(OTHER),
        "skipped": count(("skipped",)),
        "wrote files (where they should not)": sum(
            bool(result.wrote) and not result.may_write for result in results
        ),
        "code-execution markers created": sum(result.marker_created for result in results),
        "fine": sum(result.fine for result in results),
        "not fine": sum(not result.fine and result.verdict != "skipped" for result in results),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", help="run only cases whose id contains this (repeatable)")
    parser.add_argument("--json", type=Path, help="write the results to this file")
    parser.add_argument("--jobs", type=int, default=2, help="cases at a time (default 2)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per case (default 120)")
    parser.add_argument("--keep", action="store_true", help="keep the working directories")
    options = parser.parse_args()

    ids = [case.id for case in CASES]
    duplicates = {name for name in ids if ids.count(name) > 1}
    assert not duplicates, f"duplicate case ids: {duplicates}"
    cases = [case for case in CASES if not options.only or any(part in case.id for part in options.only)]
    if not cases:
        sys.exit(f"no case id contains {options.only!r}")
    root = Path(tempfile.mkdtemp(prefix="runner-bad-inputs-"))
    print(f"{len(cases)} cases, {options.jobs} at a time; working directories under {root}", flush=True)
    results: list[Result] = []
    lock = threading.Lock()
    try:
        base_run = build_base_run(root, options.timeout)
        with ThreadPoolExecutor(options.jobs) as pool:
            futures = [pool.submit(run_case, case, root, base_run, options.timeout) for case in cases]
            for future in as_completed(futures):
                result = future.result()
                with lock:
                    results.append(result)
                    print_result(result)
    finally:
        if not options.keep:
            shutil.rmtree(root, ignore_errors=True)
    order = {case.id: index for index, case in enumerate(cases)}
    results.sort(key=lambda result: order[result.id])

    summary = totals(results)
    print("\ntotals")
    for name, value in summary.items():
        print(f"  {name:<64} {value}")
    bad = [result for result in results if not result.fine and result.verdict != "skipped"]
    if bad:
        print("\nnot fine")
        for result in bad:
            wrote = f" wrote {len(result.wrote)}: {' '.join(result.wrote[:4])}" if result.wrote else ""
            print(f"  {result.id} [{result.verdict}, rc={result.exit_code}]{wrote}\n    {result.command}\n"
                  f"    {result.last_line[:300]}")  # fmt: skip
            if result.error and result.error != result.last_line:
                print(f"    {result.error[:300]}")
    executed = [result.id for result in results if result.marker_created]
    if executed:
        print(
            f"\n!!! CODE EXECUTION: these cases created the file a stored target names: {', '.join(executed)}"
        )
    if options.json:
        report = {"totals": summary, "cases": [asdict(result) for result in results]}
        options.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
