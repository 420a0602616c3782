"""``python -m runner verify-resume [overrides]``: does this setup resume exactly? runner proves it for
its own parts; a user's data set, model or callback can hold state a checkpoint misses (a count in a
plain attribute, a data set drawing from an unseeded generator), and a resumed run then drifts.

The configured setup trains a few steps twice through the real ``train`` command, in processes of its
own: once without stopping, once SIGKILLed at a random step (after the checkpoint of the step before)
and resumed. Every step's logged loss and the final checkpoints' states are then compared."""

import json
import logging
import math
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from runner.tools.job_files import read_scalars

KILL_AT = "RUNNER_VERIFY_RESUME_KILL_AT"  # the step the interrupted run is SIGKILLed at (its first start)
CALLBACK = "+callbacks.verify_resume_kill._target_=runner.tools.verify_resume.KillAt"
LIKELY_CAUSES = (
    "state outside state_dict (a count, cache or generator in a plain attribute of the model, loss or "
    "data set: keep it in a buffer, or give the object state_dict()/load_state_dict()); a data set or "
    "transform that draws from a generator of its own, unseeded (random.Random(), np.random.default_rng() "
    "without the run's seed); a callback that keeps state without state_dict()/load_state_dict()"
)
# What the two final checkpoints must hold alike, first where the run stands, then the states.
FIRST = ("global_step", "epoch", "batches_done_in_epoch", "model_state_dict", "optimizer_state_dict",
         "scheduler_state_dict", "scaler_state_dict", "rng_states")  # fmt: skip
NOT_COMPARED = ("config", "checksum", "versions", "last_val", "best_val", "best_val_step", "last_train_loss")


OWN = "sample 0 read twice"  # doctor's finding of a data set's own generator (doctor/data_checks.py)
AFTER = "RUNNER_VERIFY_RESUME_AFTER"  # the checkpoint file written (in the background) before the kill


class KillAt:
    """The callback both runs carry (so their configs are the same): in the run started with
    ``RUNNER_VERIFY_RESUME_KILL_AT=K`` it SIGKILLs its own process at the end of step K, as a crash
    would, before that step's checkpoint and once the step before's is written; elsewhere it does
    nothing."""

    def on_step_end(self, context: Any) -> None:
        if os.environ.get(KILL_AT) != str(context.step):
            return
        deadline = time.monotonic() + 600
        while not Path(os.environ.get(AFTER, "")).is_file() and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGKILL)


@dataclass
class Verdict:
    exact: bool
    lines: list[str]
    status: int = 1  # the exit status when not exact: 2 for a setup train refuses (a mistake to fix)


def train(launcher: Sequence[str], overrides: Sequence[str], run_dir: Path, kill_at: int | None = None):
    env = {key: value for key, value in os.environ.items() if key not in (KILL_AT, AFTER)}
    if kill_at is not None:
        env[KILL_AT], env[AFTER] = str(kill_at), str(run_dir / "checkpoints" / f"step_{kill_at - 1:08d}.pt")
    command = [*launcher, "train", *overrides, f"hydra.run.dir={run_dir}"]
    return subprocess.run(command, env=env, capture_output=True, text=True)


def first_difference(first: Any, second: Any, where: str) -> str | None:
    """Where two saved states first differ (tensors bit for bit, NaN equal to NaN), or None."""
    if isinstance(first, torch.Tensor) or isinstance(second, torch.Tensor):
        return None if same_tensors(first, second) else where
    if isinstance(first, Mapping) and isinstance(second, Mapping):
        for key in [*first, *(key for key in second if key not in first)]:
            if key not in first or key not in second:
                return f"{where}[{key!r}]"
            if (found := first_difference(first[key], second[key], f"{where}[{key!r}]")) is not None:
                return found
        return None
    if isinstance(first, list | tuple) and isinstance(second, list | tuple):
        if len(first) != len(second):
            return where
        for index, (one, other) in enumerate(zip(first, second, strict=True)):
            if (found := first_difference(one, other, f"{where}[{index}]")) is not None:
                return found
        return None
    both_nan = (
        isinstance(first, float) and isinstance(second, float) and math.isnan(first) and math.isnan(second)
    )
    return None if first == second or both_nan else where


def same_tensors(first: Any, second: Any) -> bool:
    if not (isinstance(first, torch.Tensor) and isinstance(second, torch.Tensor)):
        return False
    if first.shape != second.shape or first.dtype != second.dtype:
        return False
    if not first.is_floating_point():
        return torch.equal(first, second)
    nan = first.isnan()
    return torch.equal(nan, second.isnan()) and torch.equal(first.where(~nan, 0), second.where(~nan, 0))


def first_state_difference(uninterrupted: Mapping[str, Any], resumed: Mapping[str, Any]) -> str | None:
    keys = [*FIRST, *sorted(key for key in {*uninterrupted, *resumed} if key not in FIRST)]
    for key in keys:
        if key in NOT_COMPARED or (key not in uninterrupted and key not in resumed):
            continue
        if key not in uninterrupted or key not in resumed:
            return key
        if (found := first_difference(uninterrupted[key], resumed[key], key)) is not None:
            return found
    return None


def first_loss_difference(uninterrupted: Path, resumed: Path) -> str | None:
    # TensorBoard's reader warns of the resumed run's purge of the killed run's last steps: expected here.
    logging.getLogger("tensorboard").setLevel(logging.ERROR)
    losses = [{event.step: event.value for event in read_scalars(run).get("train/loss", [])}
              for run in (uninterrupted, resumed)]  # fmt: skip
    for step in sorted({*losses[0], *losses[1]}):
        one, other = losses[0].get(step), losses[1].get(step)
        if one is None or other is None or (repr(one) != repr(other)):
            return f"step {step}: train/loss {one!r} uninterrupted, {other!r} resumed"
    return None


def last_checkpoint(run_dir: Path) -> dict[str, Any] | None:
    """None for a sharded one (``strategy=fsdp``: a folder): its states are not compared."""
    path = run_dir / "checkpoints" / "last.pt"
    return None if path.is_dir() else torch.load(path, map_location="cpu", weights_only=True)


def error_of(result: subprocess.CompletedProcess) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    said = [line for line in lines if line.startswith("runner: error:")]
    return (said or lines or [f"exit status {result.returncode}"])[-1]


def verify_resume(
    overrides: Sequence[str], steps: int, kill_at: int | None, launcher: Sequence[str], work_dir: Path
) -> Verdict:
    """Train ``steps`` steps uninterrupted and, in another folder, SIGKILLed at ``kill_at`` (random in
    [2, steps - 1] if None) then resumed; compare them."""
    kill_at = kill_at if kill_at is not None else random.randint(2, steps - 1)
    settings = [*overrides, f"trainer.max_steps={steps}", "trainer.log_every_n_steps=1",
                "checkpoint.enabled=true", "checkpoint.every_n_steps=1", "checkpoint.async_save=false",
                CALLBACK]  # fmt: skip
    uninterrupted, interrupted = work_dir / "uninterrupted", work_dir / "interrupted"
    result = train(launcher, settings, uninterrupted)
    if result.returncode != 0:
        return Verdict(
            False, [f"the setup does not train: {error_of(result)}"], 2 if result.returncode == 2 else 1
        )
    killed = train(launcher, settings, interrupted, kill_at)
    if killed.returncode == 0 or (interrupted / "checkpoints" / "last.pt").exists():
        return Verdict(False, [f"the run to interrupt was not killed at step {kill_at}: {error_of(killed)}"])
    resumed = train(launcher, [*settings, f"resume={interrupted}"], interrupted)
    if resumed.returncode != 0:
        return Verdict(False, [f"the interrupted run does not resume: {error_of(resumed)}"])
    from_step = next(
        (line.split("(step ")[1].split(",")[0] for line in resumed.stdout.splitlines() if "(step " in line),
        "?",
    )
    loss = first_loss_difference(uninterrupted, interrupted)
    checkpoints = last_checkpoint(uninterrupted), last_checkpoint(interrupted)
    state = None if None in checkpoints else first_state_difference(*checkpoints)
    same = (
        "every step's loss, the weights, the optimizer, scheduler and random states are identical"
        if None not in checkpoints
        else "every step's loss is identical (sharded checkpoints: their states are not compared)"
    )
    what = (
        f"{steps} steps uninterrupted, and killed (SIGKILL) at step {kill_at} then resumed from step "
        f"{from_step}"
    )
    if loss is None and state is None:
        return Verdict(True, [f"resumes exactly: {what}: {same}"], 0)
    saved_config = (checkpoints[0] or {}).get("config", {})
    data_causes = [*worker_draws_cause(saved_config), *own_generator_cause(settings)]
    return Verdict(False, [
        f"does not resume exactly: {what}",
        f"  first differing loss: {loss or 'none (every step logged the same loss)'}",
        f"  first differing state: {state or 'none'}",
        *(f"  found: {cause}" for cause in data_causes),
        f"  likely causes: {LIKELY_CAUSES}",
        f"  both runs are kept in {work_dir}",
    ])  # fmt: skip


def worker_draws_cause(config: Mapping[str, Any]) -> list[str]:
    """The data set's draws in loader workers seeded once (``data.sample_seeds=false``): a resumed
    epoch's workers start afresh, so every sample after the resume draws anew."""
    data = config.get("data", {}) if isinstance(config, Mapping) else {}
    workers = data.get("num_workers", 0)
    if data.get("sample_seeds", True) is False and workers:
        return [
            f"the data set's random draws in loader workers: with data.sample_seeds=false and "
            f"data.num_workers={workers} each worker's generators are seeded once when it starts, so the "
            "resumed run's workers draw anew; set data.sample_seeds=true (each sample from its own seed)"
        ]
    return []


def own_generator_cause(overrides: Sequence[str]) -> list[str]:
    """``doctor``'s check of the data (run here, as the runs were): the training set's sample read twice
    at one epoch differs."""
    command = [sys.executable, "-m", "runner", "doctor", "--json", *overrides]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
        found = str(json.loads(done.stdout)[0]["found"])
    except (subprocess.TimeoutExpired, ValueError, LookupError, TypeError):
        return []
    return [f"the data set's draws (runner doctor): {found[found.index(OWN) :]}"] if OWN in found else []


def runner_launcher(processes: int) -> list[str]:
    """``python -m runner``, or under torchrun with ``processes`` processes on this machine."""
    if processes == 1:
        return [sys.executable, "-m", "runner"]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}",
            "-m", "runner"]  # fmt: skip
