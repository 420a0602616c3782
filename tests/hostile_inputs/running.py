"""A case run: its fixtures built, ``runner`` run (here as a user runs it, ``python -m runner`` in a
fresh folder, under torchrun or unprivileged where the case says), its outcome judged."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hostile_inputs.fixtures import FIXTURES, MOUNTED_FIXTURES, UNPRIVILEGED_FIXTURES
from hostile_inputs.judging import (
    OK,
    Case,
    Context,
    Result,
    Skip,
    changes,
    command_text,
    environment,
    exception_line,
    judge,
    last_line,
    snapshot,
)

# Drops root's power to ignore file permissions, so read-only places are read-only to the run.
UNPRIVILEGED = ("setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--")
TORCHRUN = ("-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m")
FINE = ("one-line", "ok", "diagnosed", "job failed", "one line per rank")
# Fixtures that plant a module where a starting interpreter would import it (the start folder, a
# project's code folder): only a fresh process shows whether it runs.
PLANTING_FIXTURES = {"planted_modules", "i39_project_planted_root", "i39_empty_table_planted",
                     "i39_project_torch_package", "i52_sitecustomize_in_code"}  # fmt: skip


def needs_a_process(case: Case) -> str:
    """Why this case means something only in a process of its own ("" where it runs in any)."""
    needs = set(case.needs)
    if case.torchrun:
        return "torchrun"
    if any("{free_port}" in value for _, value in case.env):
        return "torch.distributed's processes meet at a port"
    if needs & UNPRIVILEGED_FIXTURES:
        return "runs unprivileged (setpriv)"
    if needs & MOUNTED_FIXTURES:
        return "a full disk mounted for it"
    if needs & PLANTING_FIXTURES:
        return "a module planted where a starting interpreter imports"
    if "strategy=fsdp" in case.args or any(name.startswith("sharded_") for name in needs):
        return "strategy=fsdp starts torch.distributed"
    return ""


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def build_fixtures(case: Case, cwd: Path, ctx: Context) -> tuple[str, ...]:
    """What the case needs, in ``cwd``; the prefix its command runs under (Skip where it cannot be
    built here)."""
    prefix: tuple[str, ...] = ()
    for name in case.needs:
        where, build = FIXTURES[name]
        (cwd / where).parent.mkdir(parents=True, exist_ok=True)
        build(cwd / where, ctx)
        if name in UNPRIVILEGED_FIXTURES and os.geteuid() == 0 and shutil.which("setpriv"):
            prefix = UNPRIVILEGED
    return prefix


def release(case: Case, cwd: Path) -> None:
    """What a fixture mounted or made read-only, undone so that the folder can be removed."""
    for name in set(case.needs) & MOUNTED_FIXTURES:
        subprocess.run(["umount", str(cwd / FIXTURES[name][0])], capture_output=True)
    for folder in (cwd, cwd / "outputs"):
        if folder.is_dir() and not folder.is_symlink():
            folder.chmod(0o755)
    for path in (cwd / "run").rglob("*") if "readonly_run" in case.needs else ():
        path.chmod(path.stat().st_mode | 0o200)


def outcome(
    case: Case, exit_code: int | None, stdout: str, stderr: str, wrote: list[str], marker: bool,
    timed_out: bool = False, seconds: float = 0.0,
) -> Result:  # fmt: skip
    """The verdict and whether it is fine: the expected answer, and nothing written that should not be."""
    verdict = judge(case, exit_code, stdout, stderr, marker, timed_out)
    may_write = case.expect == OK or case.writes_ok
    fine = verdict in FINE and (may_write or not wrote)
    error = exception_line(stdout + stderr) if verdict == "traceback" else ""
    line = last_line(stderr) or last_line(stdout)
    return Result(case.id, command_text(case), case.expect, verdict, exit_code, seconds, line, error, wrote,
                  marker, may_write, fine)  # fmt: skip


def run_case(case: Case, root: Path, base_run: Path, timeout: float) -> Result:
    """``python -m runner`` in a fresh folder under ``root``, as a user runs it."""
    cwd = Path(tempfile.mkdtemp(prefix="case-", dir=root))
    marker = root / "markers" / case.id / "CREATED_BY_CODE_EXECUTION"
    marker.parent.mkdir(parents=True, exist_ok=True)
    try:
        try:
            prefix = build_fixtures(case, cwd, Context(base_run, marker))
        except Skip as skip:
            return Result(case.id, command_text(case), case.expect, "skipped", None, 0.0, str(skip))
        before = snapshot(cwd)
        started = time.monotonic()
        launcher = TORCHRUN if case.torchrun else ("-m",)
        env = {**environment(), **{name: value.format(free_port=free_port()) for name, value in case.env}}
        process = subprocess.Popen(
            [*prefix, sys.executable, *launcher, "runner", *case.args], cwd=cwd / case.cwd, env=env,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            errors="replace", start_new_session=True,
        )  # fmt: skip
        timed_out = False
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
        wrote = changes(before, snapshot(cwd))
        return outcome(case, process.returncode, stdout, stderr, wrote, marker.exists(), timed_out,
                       time.monotonic() - started)  # fmt: skip
    finally:
        release(case, cwd)
