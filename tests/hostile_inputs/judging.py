"""What a hostile case is and how its outcome is judged: exit status, the error line, files written."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
TRACEBACK = "Traceback (most recent call last)"
ONE_LINE_PREFIX = "runner: error:"
MAX_STDERR_LINES = 5  # a one-line error may follow a few warning lines
REFUSE, OK_NO_WRITE, OK = "refuse", "ok-no-write", "ok"
DIAGNOSE = "diagnose"  # doctor on a misfit: its failing check is the answer (exit 1, nothing written)
# A sweep value only a constructor refuses: that job fails (one line in the console, its traceback-free
# error in its result.json), the others run, the sweep exits 1 after its summary.
JOB_FAILS = "job-fails"
EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Failure|Train)\b")
TOUCH = "pathlib.Path.touch"


@dataclass(frozen=True)
class Case:
    """One command line: ``python -m runner *args`` in a fresh directory holding ``needs``."""

    id: str
    args: tuple[str, ...]
    expect: str = REFUSE
    needs: tuple[str, ...] = ()
    writes_ok: bool = False  # a refusal that may leave files (a full disk keeps earlier checkpoints)
    env: tuple[tuple[str, str], ...] = ()  # environment variables set for it ({free_port}: a free port)
    torchrun: bool = False  # run under torchrun with 2 processes
    cwd: str = ""  # the folder inside the working directory the command runs in
    # What a refusal's error line holds, each part (any line before it a runner warning); what the
    # output holds besides (stdout and stderr, each part), a valid command's warnings too.
    says: str | tuple[str, ...] = ()
    prints: tuple[str, ...] = ()


@dataclass
class Result:
    id: str
    command: str
    expect: str
    verdict: str
    exit_code: int | None
    seconds: float
    last_line: str
    error: str = ""  # the exception's line, where there is a traceback
    wrote: list[str] = field(default_factory=list)
    marker_created: bool = False
    may_write: bool = False  # expected to write (a valid report) or allowed to (a full disk)
    fine: bool = False


def case(
    id: str, line: str | tuple[str, ...], expect: str = REFUSE, needs: tuple[str, ...] = (), **kw: Any
) -> Case:
    args = tuple(shlex.split(line)) if isinstance(line, str) else line
    return Case(id, args, expect, needs, **kw)


def environment() -> dict[str, str]:
    """The environment a case's process starts with: no Hydra variables, one thread, this tree's runner."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("HYDRA_")}
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")]))
    return env


def runner_process(args: list[str], cwd: Path) -> tuple[int, str]:
    """``python -m runner ARGS`` in ``cwd``, as a user runs it."""
    done = subprocess.run([sys.executable, "-m", "runner", *args], cwd=cwd, env=environment(),
                          capture_output=True, text=True)  # fmt: skip
    return done.returncode, done.stderr


@dataclass(frozen=True)
class Context:
    """What fixtures build from: the finished run they copy, the file code execution would create
    (outside the working directory), and how they run runner for one (a sweep to damage afterwards)."""

    base_run: Path
    marker: Path
    runner: Callable[[list[str], Path], tuple[int, str]] = runner_process


class Skip(Exception):
    """A fixture this machine cannot build; the case is reported as skipped."""


# Under torchrun a refusal is one line from each rank (exit 2); torchrun itself then prints its own
# ChildFailedError traceback, which runner cannot change: judged by runner's lines and the ranks' exits.
TORCHRUN_REFUSE = "torchrun-refuse"


def refused_per_rank(output: str) -> bool:
    """Every line of runner's is the same one-line error (torchrun may stop a rank before it says it),
    the ranks exited 2, and every traceback frame is torchrun's own."""
    ours = [line for line in output.splitlines() if line.startswith("runner:")]
    frames = [line.strip() for line in output.splitlines() if line.strip().startswith('File "')]
    return (
        1 <= len(ours) <= 2 and len(set(ours)) == 1 and ours[0].startswith(ONE_LINE_PREFIX)
        and "exitcode  : 2" in output
        and all("runpy" in frame or "torch/distributed" in frame for frame in frames)
    )  # fmt: skip


def snapshot(root: Path) -> dict[str, tuple[int, int] | None]:
    """Every file (path -> (size, mtime_ns)) and directory (path -> None) under ``root``."""
    seen: dict[str, tuple[int, int] | None] = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [name for name in dirs if name != "__pycache__"]
        base = Path(folder)
        for name in dirs:
            seen[str((base / name).relative_to(root)) + "/"] = None
        for name in files:
            path = base / name
            try:
                stat = path.lstat()
            except OSError:
                continue
            seen[str(path.relative_to(root))] = (stat.st_size, stat.st_mtime_ns)
    return seen


def changes(before: dict, after: dict) -> list[str]:
    new = [f"+{path}" for path in after if path not in before]
    gone = [f"-{path}" for path in before if path not in after]
    changed = [f"~{path}" for path in after if path in before and after[path] != before[path]]
    return sorted(new + gone + changed)


def last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def exception_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if EXCEPTION_LINE.match(line.strip())]
    return lines[-1] if lines else ""


def is_one_line(exit_code: int | None, stderr: str) -> bool:
    lines = [line for line in stderr.splitlines() if line.strip()]
    return (
        exit_code == 2
        and bool(lines)
        and lines[-1].startswith(ONE_LINE_PREFIX)
        and len(lines) <= MAX_STDERR_LINES
        and TRACEBACK not in stderr
    )


def says_what_it_should(case: Case, stdout: str, stderr: str) -> bool:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    says = (case.says,) if isinstance(case.says, str) else case.says
    error = not says or (
        bool(lines) and all(part in lines[-1] for part in says)
        and all(line.startswith("runner: warning:") for line in lines[:-1])
    )  # fmt: skip
    return error and all(part in stdout + stderr for part in case.prints)


def judge(case: Case, exit_code: int | None, stdout: str, stderr: str, marker: bool, timed_out: bool) -> str:
    if marker:
        return "CODE-EXEC"
    if timed_out:
        return "timeout"
    if case.expect == TORCHRUN_REFUSE:
        ours = [line for line in (stdout + stderr).splitlines() if line.startswith("runner:")]
        fine = refused_per_rank(stdout + stderr) and says_what_it_should(case, "", ours[0])
        return "one line per rank" if fine else "other"
    if TRACEBACK in stdout or TRACEBACK in stderr:
        return "traceback"
    if case.expect == DIAGNOSE:
        return "diagnosed" if exit_code == 1 and "check(s) failed" in last_line(stdout) else "other"
    if case.expect == JOB_FAILS:
        return "job failed" if exit_code == 1 and "jobs failed" in stdout + stderr else "other"
    if case.expect == REFUSE:
        if exit_code == 0:
            return "accepted"
        if not is_one_line(exit_code, stderr):
            return "other"
        return "one-line" if says_what_it_should(case, stdout, stderr) else "another message"
    if exit_code == 0:
        return "ok" if says_what_it_should(case, stdout, stderr) else "another message"
    return "refused" if is_one_line(exit_code, stderr) else "other"


def command_text(case: Case) -> str:
    text = shlex.join(["python", "-m", "runner", *case.args])
    return text if len(text) <= 200 else f"{text[:180]}... ({len(text)} characters)"
