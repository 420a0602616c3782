"""The fuzzer of issue 32 (Hypothesis): real files of a finished run (its checkpoints, a sharded
checkpoint's ``runner.pt``, ``.hydra/overrides.yaml``, ``run.yaml``, event files, an Optuna study's
database), mutated by bit flips, truncation, shared values, YAML aliases, deep nesting, links, FIFOs and
out-of-range values, read by runner's own readers in this process. The contract: each file is read or
refused with one line (a ``UserError``, or a reader's warning), nothing is written, and each read ends
well within the deadline (a hang is 2**40 values walked). A bounded sample here (a few dozen examples);
``scripts/fuzz_files.py`` runs the long form."""

import os
import shutil
import sqlite3
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import yaml
from conftest import TINY, composed, run_cli, snapshot
from hostile_files import (
    HOSTILE_VALUES,
    OTHER_KINDS,
    alias_bomb,
    alias_bomb_mapping,
    flip_bits,
    runner_like_study,
    save_forged,
    save_unchecked,
)
from hydra.utils import instantiate
from hypothesis import HealthCheck, Phase, given, reject, settings
from hypothesis import strategies as st

from runner.checkpoint.files import CheckpointError, atomic_save
from runner.checkpoint.locate import checked_load, original_overrides
from runner.config.errors import UserError
from runner.experiment.train import train
from runner.observe.events import tf_record, wall_time_span
from runner.search.continuation import earlier_job
from runner.tools.job_files import read_job
from runner.tools.trained_model import load_trained_model

pytestmark = pytest.mark.slow  # the fuzzer's lane

# A hang is 2**40 values walked; a shared 2-core machine stalls a read for tens of seconds at times.
DEADLINE = timedelta(seconds=120)
QUICK_PHASES = [Phase.explicit, Phase.reuse, Phase.generate]  # the suite reports a failure unshrunk

settings.register_profile(
    "suite", max_examples=6, deadline=DEADLINE, derandomize=True, phases=QUICK_PHASES,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)  # fmt: skip
settings.register_profile(
    "long", max_examples=int(os.environ.get("RUNNER_FUZZ_EXAMPLES", "500")), deadline=DEADLINE,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)  # fmt: skip
settings.load_profile(os.environ.get("RUNNER_FUZZ_PROFILE", "suite"))


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """A tiny run trained in this process, with Hydra's record of its command line as a CLI run has it."""
    run_dir = tmp_path_factory.mktemp("fuzz") / "run"
    run_dir.mkdir()
    overrides = [*TINY, "trainer.max_steps=2"]
    train(composed(*overrides), run_dir, build=instantiate)
    (run_dir / ".hydra").mkdir()
    (run_dir / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    return run_dir


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> Path:
    """A study's database holding one trial as runner records it."""
    return runner_like_study(tmp_path_factory.mktemp("study") / "sweep", "digits_optuna")


def one_line(error: BaseException) -> None:
    assert isinstance(error, UserError), repr(error)
    assert str(error) and "\n" not in str(error), str(error)


# Whole-file damage: bits flipped, cut short, a link where the file was, a FIFO, nothing.
def damaged_bytes(data: bytes) -> st.SearchStrategy:
    size = max(len(data), 1)
    return st.one_of(
        st.lists(st.integers(0, size * 8 - 1), min_size=1, max_size=16).map(lambda at: ("flip", at)),
        st.integers(0, size - 1).map(lambda keep: ("truncate", keep)),
        st.sampled_from([("link", "/dev/zero"), ("link", "."), ("link", "missing"), ("fifo", None),
                         ("random", None)]),
    )  # fmt: skip


def damage(path: Path, data: bytes, how: tuple) -> None:
    kind, detail = how
    path.unlink(missing_ok=True)
    if kind == "flip":
        path.write_bytes(flip_bits(data, detail))
    elif kind == "truncate":
        path.write_bytes(data[:detail])
    elif kind == "link":
        path.symlink_to(detail)
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.write_bytes(os.urandom(len(data)))


def unchanged(folder: Path, before: dict) -> None:
    assert snapshot(folder) == before, "a reader wrote"


@given(draw=st.data())
def test_a_damaged_checkpoint_is_loaded_or_refused_in_one_line(run, tmp_path_factory, draw):
    work = tmp_path_factory.mktemp("ckpt")
    data = (run / "checkpoints" / "last.pt").read_bytes()
    path = work / "last.pt"
    damage(path, data, draw.draw(damaged_bytes(data)))
    before = snapshot(work)
    try:
        checked_load(path)
    except CheckpointError as error:
        one_line(error)
    unchanged(work, before)


@given(key=st.sampled_from(["config", "seed", "global_step", "rng_states", "model_state_dict", "planned"]),
       value=st.sampled_from(sorted(HOSTILE_VALUES)), size=st.integers(1, 8),
       matching=st.booleans(), sharded=st.booleans())  # fmt: skip
def test_a_forged_checkpoint_is_refused_in_bounded_work(
    run, tmp_path_factory, key, value, size, matching, sharded
):
    """Shared, deep, long or out-of-range values in place of an entry, with a checksum that matches
    (computed with the budget lifted, where that ends) or not; as a file, or as a sharded checkpoint's
    ``runner.pt`` beside an index."""
    work = tmp_path_factory.mktemp("forged")
    base = torch.load(run / "checkpoints" / "last.pt", weights_only=True)
    base.pop("checksum")
    hostile = HOSTILE_VALUES[value](size)
    base[key] = {**base[key], "extra": hostile} if isinstance(base[key], dict) else hostile
    folder = work / "step_00000002" if sharded else work
    folder.mkdir(exist_ok=True)
    path = folder / ("runner.pt" if sharded else "last.pt")
    if sharded:
        (folder / ".metadata").write_bytes(b"")
    if matching and value in ("negative", "nan", "text", "none"):
        atomic_save(base, path)
    else:
        save_unchecked(base, path)
    before = snapshot(work)
    try:
        checked_load(folder if sharded else path)
    except CheckpointError as error:
        one_line(error)
    unchanged(work, before)


OPTIONAL_KEYS = ["averaged_model_state_dict", "frozen_weights_sha256", "callbacks_state_dict",
                 "dataset_state_dict", "sampler_state_dict", "carried_state_dict"]  # fmt: skip


@given(draw=st.data(), value=st.sampled_from(sorted(OTHER_KINDS)), weight=st.booleans())
def test_a_key_of_another_kind_with_a_matching_checksum_is_refused_in_one_line(
    run, tmp_path_factory, draw, value, weight
):
    """Any key a checkpoint holds (or may hold), or one weight, given a value of another kind, its
    checksum computed again: ``load_model``'s reader loads the model or refuses in one line."""
    work = tmp_path_factory.mktemp("kinds")
    base = torch.load(run / "checkpoints" / "last.pt", weights_only=True)
    if weight:
        weights = base["model_state_dict"]
        name = draw.draw(st.sampled_from(sorted(weights)))
        changes = {"model_state_dict": {**weights, name: OTHER_KINDS[value]()}}
    else:
        key = draw.draw(st.sampled_from(sorted({*base, *OPTIONAL_KEYS} - {"checksum"})))
        changes = {key: OTHER_KINDS[value]()}
    path = save_forged(base, work / "last.pt", **changes)
    before = snapshot(work)
    try:
        load_trained_model(path, instantiate, {"runner.models.mlp"})
    except UserError as error:
        one_line(error)
    unchanged(work, before)


RECORDS = {
    "overrides": (".hydra/overrides.yaml", alias_bomb),
    "run.yaml": ("run.yaml", alias_bomb_mapping),
}


def yaml_payloads(data: bytes) -> st.SearchStrategy:
    return st.one_of(
        st.integers(1, 9).map(lambda levels: ("aliases", levels)),
        st.integers(50, 20_000).map(lambda depth: ("deep", depth)),
        st.binary(max_size=64).map(lambda junk: ("junk", junk)),
        damaged_bytes(data),
    )


@given(record=st.sampled_from(sorted(RECORDS)), draw=st.data())
def test_a_damaged_run_record_is_read_or_refused_in_one_line(run, tmp_path_factory, record, draw):
    """``resume``'s reader of ``.hydra/overrides.yaml``, report's of every record, a continued sweep's
    of ``run.yaml``: each answers in one line (a warning for report)."""
    work = tmp_path_factory.mktemp("record") / "run"
    shutil.copytree(run, work, ignore=shutil.ignore_patterns("checkpoints"))
    name, bomb = RECORDS[record]
    path = work / name
    data = path.read_bytes()
    kind, detail = draw.draw(yaml_payloads(data))
    if kind == "aliases":
        path.write_text(bomb(detail))
    elif kind == "deep":
        path.write_text("[" * detail + "]" * detail)
    elif kind == "junk":
        path.write_bytes(data[: len(data) // 2] + detail)
    else:
        damage(path, data, (kind, detail))
    before = snapshot(work)
    for reader in (original_overrides, lambda folder: earlier_job(folder, {}), read_job):
        try:
            reader(work)
        except UserError as error:
            one_line(error)
    unchanged(work, before)


@given(draw=st.data())
def test_a_damaged_event_file_is_read_or_skipped(run, tmp_path_factory, capsys, draw):
    work = tmp_path_factory.mktemp("events") / "run"
    shutil.copytree(run, work, ignore=shutil.ignore_patterns("checkpoints"))
    (path,) = [p for p in work.glob("events.out.tfevents.*") if not p.name.endswith("hparams")]
    data = path.read_bytes()
    how = draw.draw(
        st.one_of(st.binary(max_size=64).map(lambda junk: ("records", junk)), damaged_bytes(data))
    )
    if how[0] == "records":
        path.write_bytes(data + tf_record(how[1]))
    else:
        damage(path, data, how)
    before = snapshot(work)
    read_job(work)
    if path.is_file():
        wall_time_span(path)
    assert "Traceback" not in capsys.readouterr().err
    unchanged(work, before)


STUDY_EDITS = [
    ("trial_params", "distribution_json"),
    ("trial_params", "param_value"),
    ("trial_user_attributes", "value_json"),
    ("trial_values", "value"),
    ("studies", "study_name"),
]


@given(edit=st.sampled_from(STUDY_EDITS),
       value=st.one_of(st.text(max_size=40), st.integers(), st.floats(), st.just("[" * 20_000),
                       st.just('{"name": "FloatDistribution", "attributes": {"low": 1, "high": 0}}')),
       flips=st.lists(st.integers(0, 8 * 4096 - 1), max_size=4))  # fmt: skip
def test_a_tampered_study_is_read_or_refused_in_one_line(study, tmp_path_factory, edit, value, flips):
    """What the search reads of a study before it writes anything (``open_study``'s checks)."""
    from runner.search.storage import existing_study, open_checked_storage
    from runner.search.trials import own_trials

    sweep = tmp_path_factory.mktemp("study") / "sweep"
    sweep.mkdir()
    database = Path(shutil.copy2(study, sweep / "optuna.db"))
    table, column = edit
    try:
        with sqlite3.connect(database) as connection:
            connection.execute(f"UPDATE {table} SET {column} = ?", (value,))
    except (sqlite3.IntegrityError, OverflowError):  # the schema refuses it (a NULL name), or SQLite
        reject()  # cannot hold it (an integer past 64 bits): no such file to read
    if flips:
        data = database.read_bytes()
        database.write_bytes(data[:4096] + flip_bits(data[4096:], flips))
    before = snapshot(sweep)
    try:
        storage = open_checked_storage(f"sqlite:///{database}")
        study = existing_study(storage, "digits_optuna")
        if study is not None:
            own_trials(study, sweep, own_only=True)
    except UserError as error:
        one_line(error)
    unchanged(sweep, before)


def test_report_and_eval_answer_mutated_files_through_the_cli(tmp_path, run):
    """A few CLI runs over what the fuzzer makes: report over a sweep of damaged jobs, eval of a forged
    checkpoint; exit 0 (report warns) or 2 in one line, nothing written."""
    sweep = tmp_path / "sweep"
    for number, damaged in enumerate(["aliases", "deep", "events", "checkpoint"]):
        job = sweep / f"00{number}_seed={number}"
        shutil.copytree(run, job)
        if damaged == "aliases":
            (job / "run.yaml").write_text(alias_bomb_mapping())
        elif damaged == "deep":
            (job / ".hydra" / "overrides.yaml").write_text("[" * 50_000 + "]" * 50_000)
        elif damaged == "events":
            for path in job.glob("events.out.tfevents.*"):
                path.write_bytes(path.read_bytes() + tf_record(b"\x08\x96\x01junk"))
    checkpoint = torch.load(run / "checkpoints" / "last.pt", weights_only=True)
    checkpoint["config"] = {**checkpoint["config"], "extra": HOSTILE_VALUES["strided-view"](8)}
    forged = save_unchecked(checkpoint, tmp_path / "forged.pt")
    before = snapshot(tmp_path)
    result = run_cli("report", "sweep", cwd=tmp_path, timeout=120)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    evaluated = run_cli("eval", f"ckpt={forged}", cwd=tmp_path, timeout=120)
    assert evaluated.returncode == 2 and "Traceback" not in evaluated.stderr, evaluated.stderr
    assert len(evaluated.stderr.strip().splitlines()) == 1, evaluated.stderr
    after = snapshot(tmp_path)
    written = {name for name in after if name not in before or after[name] != before[name]}
    assert written == {"sweep/summary.csv", "sweep/summary.md", "sweep/summary.png"} - {
        name for name in ("sweep/summary.png",) if name not in after
    }
