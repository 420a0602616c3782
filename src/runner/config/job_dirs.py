"""Where a sweep's jobs live. A job's directory is named by its number, zero-padded so that ``ls`` and
TensorBoard list the jobs in order, then the settings the sweep varies: ``003_optimizer.lr=0.01,seed=1``.
TensorBoard names a run by its directory, so ``tensorboard --logdir outputs`` says what each job tried.

What finds a job by its number (``resume=<sweep dir>/3``, a continued sweep, a search's trials) looks
the number up here, so a directory named only by its number (``3``, as sweeps were named before, or
with ``hydra.sweep.subdir=${hydra.job.num}``) is found too."""

import re
from collections.abc import Sequence
from pathlib import Path

MIN_DIGITS = 3
NAME_BYTES = 200  # well under the 255 bytes a folder name may take on common file systems
DROPPED = re.compile(r"[\[\](){}'\"]")  # a list's brackets, a quoted value's quotes
UNSAFE = re.compile(r"[^A-Za-z0-9._+\-=,@%]")  # what paths, shells or globs treat specially
SIGNIFICANT_DIGITS = 4


def shown_value(value: str) -> str:
    """A setting's value as a folder name holds it: a float to 4 significant digits (Optuna proposes
    17), a list without its brackets, any character outside letters, digits and ``._+-=,@%`` as ``_``."""
    try:
        int(value)
    except ValueError:
        try:
            number = float(value)
        except ValueError:
            pass
        else:
            value = f"{number:.{SIGNIFICANT_DIGITS}g}"
    return UNSAFE.sub("_", DROPPED.sub("", re.sub(r",\s+", ",", value)))


def job_dir_name(number: int, jobs: int, settings: Sequence[tuple[str, str]]) -> str:
    """``003_optimizer.lr=0.01,seed=1``: job ``number`` of a sweep of ``jobs`` (0 where unknown), padded
    to 3 digits or as many as the sweep's last job has, then its swept ``settings`` (key, value as
    given), cut to ``NAME_BYTES``."""
    digits = max(MIN_DIGITS, len(str(max(jobs - 1, number))))
    shown = ",".join(f"{UNSAFE.sub('_', key.lstrip('+~'))}={shown_value(value)}" for key, value in settings)
    name = f"{number:0{digits}d}" + (f"_{shown}" if shown else "")
    return name if len(name) <= NAME_BYTES else name[: NAME_BYTES - 3] + "..."


def job_number(name: str) -> int | None:
    """The job number a job directory's name starts with (``003_optimizer.lr=0.01`` and ``3`` are job
    3); None for any other name."""
    found = re.fullmatch(r"([0-9]+)(_.*)?", name, flags=re.DOTALL)  # ASCII: int() takes no "²"
    return int(found[1]) if found else None


def find_job_dir(sweep_dir: Path, number: int) -> Path | None:
    """The directory of job ``number`` in ``sweep_dir``, or None."""
    try:
        found = sorted(
            path for path in sweep_dir.iterdir() if job_number(path.name) == number and path.is_dir()
        )
    except OSError:
        return None
    return found[0] if found else None


def numbered(path: Path) -> Path:
    """``<sweep dir>/3``, as people name a job: the directory of job 3 there, whatever else its name
    holds. Any other path, or one that exists, as it is."""
    if not re.fullmatch(r"[0-9]+", path.name) or path.exists():  # "²".isdigit() is true, int("²") fails
        return path
    return find_job_dir(path.parent, int(path.name)) or path
