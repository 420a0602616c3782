"""Hostile files of issue 32 as an attacker makes them: small files whose sharing, aliasing or nesting
multiplies the work of whoever walks them, and records that are not what their names say. Used by the
CLI tests (tests/test_bounded_files.py), the fuzzer (tests/test_fuzz_files.py) and
scripts/fuzz_files.py."""

import sqlite3
from pathlib import Path
from typing import Any

import torch

from runner.checkpoint.files import CHECKSUM_KEY


def shared_dag(levels: int = 40) -> dict:
    """``levels`` of ``{"a": x, "b": x}``: a few hundred bytes pickled, 2**levels values walked."""
    value: dict = {}
    for _ in range(levels):
        value = {"a": value, "b": value}
    return value


def save_unchecked(checkpoint: dict[str, Any], path: Path, stored: str = "sha256:" + "0" * 64) -> Path:
    """``checkpoint`` as ``torch.save`` writes it, with ``stored`` as its checksum: computing a true one
    is the walk that never ends, and a reader must refuse the file before it knows whether it matches."""
    torch.save({**checkpoint, CHECKSUM_KEY: stored}, path)
    return path


def shared_config_checkpoint(base: dict[str, Any], path: Path, levels: int = 40) -> Path:
    """A copy of ``base`` whose config holds ``shared_dag(levels)`` (a few KB on disk)."""
    checkpoint = {key: value for key, value in base.items() if key != CHECKSUM_KEY}
    checkpoint["config"] = {**checkpoint["config"], "model": {**checkpoint["config"]["model"]}}
    checkpoint["config"]["model"]["extra"] = shared_dag(levels)
    return save_unchecked(checkpoint, path)


def alias_bomb(levels: int = 9, width: int = 10) -> str:
    """YAML list items, each anchored and made of ``width`` aliases of the one before: about 1 KB,
    ``width**levels`` values to whoever walks the last one."""
    lines = [f"- &a0 [{', '.join(['x'] * width)}]"]
    lines += [f"- &a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def alias_bomb_mapping(levels: int = 9, width: int = 10) -> str:
    """``alias_bomb`` as a mapping (the shape of ``run.yaml``)."""
    lines = [f"a0: &a0 [{', '.join(['x'] * width)}]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def tamper_study(database: Path, how: str) -> None:
    """Edit an Optuna study's SQLite file as an attacker would: ``low-above-high`` (a distribution
    whose low is above its high), ``attr-not-json`` (a user attribute that is not JSON),
    ``attr-deep`` (one nested 100,000 deep)."""
    with sqlite3.connect(database) as connection:
        if how == "low-above-high":
            connection.execute(
                "UPDATE trial_params SET distribution_json = ?",
                ('{"name": "FloatDistribution", "attributes": {"low": 1.0, "high": 0.1, "log": false, '
                 '"step": null}}',),
            )  # fmt: skip
        elif how == "attr-not-json":
            connection.execute("UPDATE trial_user_attributes SET value_json = ?", ("{not json",))
        elif how == "attr-deep":
            connection.execute(
                "UPDATE trial_user_attributes SET value_json = ?", ("[" * 100_000 + "]" * 100_000,)
            )
        else:
            raise ValueError(how)


def runner_like_study(sweep_dir: Path, study_name: str) -> Path:
    """A study holding one finished trial as runner records it (its job attributes), in the sweep
    directory's ``optuna.db``."""
    import optuna

    sweep_dir.mkdir(parents=True, exist_ok=True)
    database = sweep_dir / "optuna.db"
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(storage=f"sqlite:///{database}", study_name=study_name)
    study.add_trial(
        optuna.trial.create_trial(
            params={"optimizer.lr": 1e-3},
            distributions={"optimizer.lr": optuna.distributions.FloatDistribution(1e-4, 3e-2, log=True)},
            value=0.5,
            user_attrs={"runner_job": 0, "runner_sweep_dir": str(sweep_dir.resolve()), "runner_fixed": []},
        )
    )
    return database


# Mutations the fuzzer draws (tests/test_fuzz_files.py, scripts/fuzz_files.py): each takes a file's
# bytes, or a loaded checkpoint, and a Hypothesis draw.


def flip_bits(data: bytes, positions: list[int]) -> bytes:
    changed = bytearray(data)
    for position in positions:
        changed[(position // 8) % len(changed)] ^= 1 << (position % 8)
    return bytes(changed)


def nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


def shared_string(length: int, times: int) -> list[str]:
    """One string of ``length`` characters ``times`` over: pickle stores it once."""
    text = "x" * length
    return [text] * times


def strided_view(length: int) -> torch.Tensor:
    """One float viewed ``length`` times (stride 0): 4 bytes on disk, ``4 * length`` once made whole."""
    return torch.zeros(1).expand(length)


# Values put in place of a checkpoint's entry: shared, aliased, deep, out of range or of another kind.
HOSTILE_VALUES = {
    "dag": lambda size: shared_dag(min(size, 60)),
    "deep": lambda size: nested(200 + size * 50),
    "shared-string": lambda size: shared_string(1000 * size, 10_000 * size),
    "strided-view": lambda size: strided_view(10 ** min(size + 6, 14)),
    "negative": lambda size: -size,
    "huge-int": lambda size: 10 ** (4000 + size * 100),
    "nan": lambda size: float("nan"),
    "text": lambda size: "x" * size,
    "none": lambda size: None,
}


def save_forged(checkpoint: dict[str, Any], path: Path, **changes: Any) -> Path:
    """``checkpoint`` with ``changes`` to its keys and its checksum computed again, as a forger who read
    runner's code writes it: only what each key holds can give it away."""
    from runner.checkpoint.files import NotData, checksum

    forged = {key: value for key, value in checkpoint.items() if key != CHECKSUM_KEY} | changes
    try:
        stored = checksum(forged)
    except NotData:  # a tensor whose bytes the checksum cannot read: the reader refuses it before comparing
        stored = "sha256:" + "0" * 64
    torch.save({**forged, CHECKSUM_KEY: stored}, path)
    return path


# Values of other kinds a forger puts in place of a key, or of one weight (tests/test_fuzz_files.py).
OTHER_KINDS = {
    "tensor": lambda: torch.ones(3),
    "dict-of-ints": lambda: {"a": 1},
    "text": lambda: "x",
    "int": lambda: 5,
    "none": lambda: None,
    "list": lambda: [1, 2],
    "complex": lambda: torch.ones(3, dtype=torch.complex64),
    "meta": lambda: torch.empty(3, device="meta"),
    "sparse": lambda: torch.zeros(3).to_sparse(),
}
