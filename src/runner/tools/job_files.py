"""What one run left on disk, read once for its summary: TensorBoard events,
``.hydra/overrides.yaml``, ``run.yaml`` and ``result.json``. A damaged file is skipped with one warning."""

import json
import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf.message import DecodeError
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator, ScalarEvent

from runner.config.bounded_read import UnreadableRecord, read_bounded, read_plain
from runner.config.job_dirs import job_number
from runner.observe.events import holds_only_events, wall_time_span
from runner.observe.hparams import HPARAMS_FILE
from runner.observe.records import RESULT_FILE, current_tag
from runner.observe.sweep_hparams import EXPERIMENT_FILE

logging.getLogger("tensorboard").setLevel(logging.WARNING)  # its event reader chats at INFO


@dataclass
class JobFiles:
    """What one job left on disk, each file read once (a damaged one warns once)."""

    directory: Path
    overrides: dict[str, str]
    record: dict[str, Any]
    result: dict[str, Any]
    scalars: dict[str, list[ScalarEvent]]


def has_events(directory: Path) -> bool:
    """A run's event files; a sweep directory holds only the columns of its HParams tab."""
    return any(path.name != EXPERIMENT_FILE for path in directory.glob("events.out.tfevents.*"))


def find_runs(directory: Path) -> list[Path]:
    """A single run directory, or the job directories of a sweep (numbered ones by number)."""
    if has_events(directory) or (directory / RESULT_FILE).exists():
        return [directory]
    jobs = [path for path in directory.iterdir() if path.is_dir() and (path / ".hydra").is_dir()]
    return sorted(
        jobs, key=lambda path: (job_number(path.name) is None, job_number(path.name) or 0, path.name)
    )


def plain_file(path: Path) -> bool:
    """Whether ``path`` is a file to read: a FIFO would block the read, a device (``/dev/zero``) never end
    it; either is skipped with a warning."""
    if path.is_file():
        return True
    print(f"runner: warning: skipping {path}: it is not a plain file", file=sys.stderr)
    return False


def read_yaml(path: Path, kind: type) -> Any:
    """A run's YAML record, or None where it is missing or damaged (then the summary does without it,
    with a warning)."""
    if not path.exists() or not plain_file(path):
        return None
    try:
        content = read_plain(path)  # no aliases, bounded nesting: work bounded by the file's size
    except (OSError, UnreadableRecord) as error:
        print(f"runner: warning: skipping {path}: {str(error).splitlines()[0]}", file=sys.stderr)
        return None
    if content is not None and not isinstance(content, kind):
        print(f"runner: warning: skipping {path}: it holds a {type(content).__name__}", file=sys.stderr)
        return None
    return content


def read_result(path: Path) -> dict[str, Any]:
    """A run's ``result.json``. A damaged one (a full disk once left 0 bytes) is skipped with a
    warning, and the run is summarised from its events."""
    if not path.exists() or not plain_file(path):
        return {}
    try:
        result = json.loads(read_bounded(path))
        if not isinstance(result, dict):
            raise ValueError(f"it holds a JSON {type(result).__name__}, not an object")
    except RecursionError:  # arrays or objects nested thousands deep: no record runner writes
        print(f"runner: warning: skipping {path}: it is nested too deeply", file=sys.stderr)
        return {}
    except (OSError, ValueError) as error:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        empty = isinstance(error, json.JSONDecodeError) and not error.doc.strip()
        print(f"runner: warning: skipping {path}: {'it is empty' if empty else error}", file=sys.stderr)
        return {}
    return result


def split_override(override: str) -> tuple[str, str]:
    """``key=value`` as (key, value); ``+key``/``++key`` name the same key, ``~key`` removes it."""
    key, _, value = override.partition("=")
    if key.startswith("~"):
        return key.lstrip("~"), "removed"
    return key.lstrip("+"), value


def overrides_of(run_dir: Path) -> dict[str, str]:
    """The overrides the run last ran with: a resume's record (``.hydra/resume-<time>/``, holding the
    original overrides it applied again and the ones it changed) over the original; not ``resume``, which
    names a file."""
    resumes = sorted((run_dir / ".hydra").glob("resume-*/overrides.yaml"))
    overrides = read_yaml(resumes[-1] if resumes else run_dir / ".hydra" / "overrides.yaml", list) or []
    pairs = dict(split_override(str(override)) for override in overrides)
    pairs.pop("resume", None)
    return pairs


def read_scalars(run_dir: Path) -> dict[str, list[ScalarEvent]]:
    if not has_events(run_dir):
        return {}
    # TensorBoard reads every event file of the folder: one that is not a plain file stops them all.
    if not all(plain_file(path) for path in run_dir.glob("events.out.tfevents.*")):
        return {}
    try:
        str(run_dir).encode("utf-8")
    except UnicodeEncodeError:  # TensorBoard's reader takes folder names as UTF-8 text only
        print(
            f"runner: warning: skipping the events of {printable(run_dir)}: its name is not UTF-8",
            file=sys.stderr,
        )
        return {}
    accumulator = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    try:
        accumulator.Reload()
    except DecodeError:  # whole records, with valid checksums, of something else
        odd = [
            path.name for path in sorted(run_dir.glob("events.out.tfevents.*")) if not holds_only_events(path)
        ]
        print(f"runner: warning: skipping the events of {run_dir}: {', '.join(odd) or 'an event file'} holds "
              "records that are not events", file=sys.stderr)  # fmt: skip
        return {}
    return {current_tag(tag): accumulator.Scalars(tag) for tag in accumulator.Tags()["scalars"]}


def printable(text: str | Path) -> str:
    """A file name as UTF-8 text can hold it: bytes that are not UTF-8 (which Python keeps as lone
    surrogates) as ``\\xff``."""
    return str(text).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def read_job(run_dir: Path) -> JobFiles:
    """Every record of a job, read once, so a damaged file warns once."""
    return JobFiles(
        directory=run_dir,
        overrides=overrides_of(run_dir),
        record=read_yaml(run_dir / "run.yaml", dict) or {},
        result=read_result(run_dir / RESULT_FILE),
        scalars=read_scalars(run_dir),
    )


def effective_batch_of(job: JobFiles) -> int | None:
    """Samples per optimizer step (batch x accumulate x world size), as the run resolved it."""
    runtime = job.record.get("runtime")
    size = runtime.get("effective_batch_size") if isinstance(runtime, dict) else None
    return size if isinstance(size, int) and size > 0 else None


def wall_seconds_of(job: JobFiles) -> float | None:
    """The run's time over all its processes (a resumed run has one per start): ``result.json``'s for
    the process that wrote it (the last), plus the logging time of each earlier process's event file.
    The time between processes (stopped, waiting for a resume) is not the run's."""
    spans = sorted(span for path in event_files(job.directory) if (span := wall_time_span(path)))
    recorded = job.result.get("wall_seconds")
    if not isinstance(recorded, int | float):
        return sum(last - first for first, last in spans) if spans else None
    return recorded + sum(last - first for first, last in spans[:-1])


def event_files(run_dir: Path) -> list[Path]:
    """A run's event files of scalars, one per process that logged (not its HParams record)."""
    return [
        path for path in run_dir.glob("events.out.tfevents.*")
        if path.name != HPARAMS_FILE and path.is_file()  # a device would be read without end
    ]  # fmt: skip
