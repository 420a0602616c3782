"""A sweep run again with the same ``hydra.sweep.dir`` continues: a job that finished (``result.json``
ok or pruned) is not run again, a job that was interrupted continues from its own newest checkpoint
(bit-exact, as ``resume=auto`` does), a job that failed or never saved starts again. A job directory
is the same job only if the run recorded there had this job's settings: one from another sweep is
refused, never overwritten."""

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.checkpoint.locate import Found, own_checkpoint
from runner.config.bounded_read import UnreadableRecord, read_plain
from runner.config.errors import ConfigError, UserError, show
from runner.config.typed import flatten
from runner.observe.records import recorded_result

FINISHED = ("ok", "pruned")


class OtherJobInTheWay(UserError):
    """The job directory holds a run with other settings (a sweep directory reused by another command)."""


class DamagedRecord(UserError):
    """The job directory's ``run.yaml`` cannot be read: whether the run there is this job's is unknown,
    so nothing there is replaced (the job needs a look)."""


def readable_record(record: Path) -> Any:
    """``run.yaml``'s data (None where it is empty, as a full disk leaves it); ``DamagedRecord`` where
    it cannot be read or holds no mapping."""
    try:
        loaded = read_plain(record)
    except (OSError, UnreadableRecord) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        raise DamagedRecord(
            f"{record} cannot be read ({reason}); its checkpoints and result are left as they are"
        ) from None
    if loaded is not None and not isinstance(loaded, dict):
        raise DamagedRecord(
            f"{record} cannot be read (it holds a {type(loaded).__name__}, not a run's record); its "
            "checkpoints and result are left as they are"
        )
    return loaded


@dataclass(frozen=True)
class EarlierJob:
    """What an earlier run of this sweep left in the job's directory."""

    result: dict[str, Any]  # its result.json: a finished job's status and values
    checkpoint: Found | None  # an interrupted job's newest checkpoint

    @property
    def finished(self) -> bool:
        return self.result.get("status") in FINISHED


def differences(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    before, now = flatten(recorded), flatten(current)
    return [
        f"{key} ({show(before.get(key))} there, {show(now.get(key))} now)"
        for key in sorted(before.keys() | now.keys())
        if before.get(key) != now.get(key)
    ]


def earlier_job(run_dir: Path, config: dict[str, Any]) -> EarlierJob | None:
    """The run an earlier invocation of this sweep left in ``run_dir`` (None: none, start afresh).
    ``config``: this job's settings, which the recorded run must have had."""
    recorded: dict[str, Any] | None = None
    record = run_dir / "run.yaml"
    if record.exists() or record.is_symlink():
        loaded = readable_record(record)
        if isinstance(loaded, dict):
            recorded = {key: value for key, value in loaded.items() if key != "runtime"}
    try:
        checkpoint = own_checkpoint(run_dir) if recorded is not None else None
    except ConfigError as error:  # its checkpoints' folder holds what runner would have to replace
        raise DamagedRecord(str(error)) from None
    if checkpoint is not None:
        recorded = checkpoint.checkpoint["config"]
    if recorded is None:
        return None
    changed = differences(recorded, config)
    if changed:
        raise OtherJobInTheWay(
            f"{run_dir} holds a run of other settings ({', '.join(changed[:3])}"
            f"{', ...' if len(changed) > 3 else ''}): this sweep directory belongs to another sweep; give "
            "this one its own hydra.sweep.dir (nothing was changed there)"
        )
    return EarlierJob(recorded_result(run_dir), checkpoint)
