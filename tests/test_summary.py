"""The summary of a sweep (summary.csv, summary.md, summary.png), built in-process from real files: jobs
trained here, or job directories written with runner's own record and event writers."""

import csv
from pathlib import Path

import matplotlib
import pytest
import yaml
from conftest import TINY, event_files
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

from runner.observe.records import write_result, write_run_record
from runner.observe.writer import TensorBoardLogger
from runner.tools.report import write_summary
from runner.tools.run_summary import rounded, significant, summarise
from runner.tools.summary_plot import draw_curves

matplotlib.use("Agg")

OPTUNA_LR = ("0.0022881136684755237", "0.016181912728325778", "0.00014995637370185023")


def write_job(
    sweep: Path,
    name: str,
    overrides: list[str],
    curve: dict[int, dict[str, float]],
    batch: int = 32,
    status: str | None = "ok",
    monitor: tuple[str, str] = ("val/loss", "min"),
) -> Path:
    """A job directory as a sweep leaves it: overrides.yaml, run.yaml, events and (unless it was
    killed: ``status=None``) result.json."""
    job = sweep / name
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    checkpoint = {"monitor": monitor[0], "mode": monitor[1]}
    write_run_record(job, {"checkpoint": checkpoint}, {"effective_batch_size": batch})
    logger = TensorBoardLogger(job)
    for step, scalars in curve.items():
        logger.log_scalars(step, scalars)
    logger.close()
    if status is not None:
        write_result(job, status, wall_seconds=12.3456)
    return job


def losses(*values: float, acc: float = 0.5) -> dict[int, dict[str, float]]:
    """A val/loss curve validated every 10 steps, with a val/acc and the running best beside it."""
    return {
        10 * (index + 1): {"val/loss": value, "val/acc": acc, "val/loss_best": min(values[: index + 1])}
        for index, value in enumerate(values)
    }


def optuna_like(sweep: Path) -> None:
    """Three trials, as the Optuna sweeper writes them: long floats, every key in every job, the
    sweep's own overrides after them."""
    shared = ["hparams_search=digits_optuna", "trainer.max_steps=60"]
    for name, lr, batch, hidden, curve in (
        ("0", OPTUNA_LR[0], 16, "[64]", losses(1.8, 1.4161, acc=0.72)),
        ("1", OPTUNA_LR[1], 16, "[128]", losses(0.9, 0.29374, acc=0.89)),
        ("2", OPTUNA_LR[2], 64, "[128]", losses(2.3, 2.2, acc=0.38)),
    ):
        overrides = [f"optimizer.lr={lr}", f"data.batch_size={batch}", f"model.hidden={hidden}", *shared]
        write_job(sweep, name, overrides, curve, batch=batch)


def read_csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with open(path, newline="") as handle:
        reader = csv.DictReader(handle)
        return list(reader.fieldnames or []), list(reader)


def test_numbers_are_rounded_to_four_significant_digits():
    assert [rounded(value) for value in OPTUNA_LR] == ["0.002288", "0.01618", "0.00015"]
    assert [rounded(value) for value in ("32", "[128]", "adam", "true", "1e-05")] == [
        "32", "[128]", "adam", "true", "1e-05"
    ]  # fmt: skip
    assert [significant(value) for value in (0.29374, 12345.6, 2.0)] == ["0.2937", "12350", "2"]


def test_csv_has_a_plain_header_and_one_column_per_swept_key(tmp_path):
    optuna_like(tmp_path)
    write_summary(tmp_path)
    text = (tmp_path / "summary.csv").read_text()
    assert text.endswith("\n") and "\r" not in text
    header, rows = read_csv(tmp_path / "summary.csv")
    assert header == [
        "job", "status", "optimizer.lr", "data.batch_size", "model.hidden", "best_val_loss", "mode",
        "step_of_best", "final_val_acc", "final_val_loss", "steps", "wall_seconds",
    ]  # fmt: skip
    assert [row["job"] for row in rows] == ["1", "0", "2"]  # best first
    # For programs: the swept values exactly as the jobs ran them (Optuna's 17 digits), metrics to the
    # float32 precision TensorBoard keeps; summary.md rounds them for people.
    assert rows[0] == {
        "job": "1", "status": "ok", "optimizer.lr": "0.016181912728325778", "data.batch_size": "16",
        "model.hidden": "[128]", "best_val_loss": "0.29374", "mode": "min", "step_of_best": "20",
        "final_val_acc": "0.89", "final_val_loss": "0.29374", "steps": "20", "wall_seconds": "12.346",
    }  # fmt: skip


def test_markdown_shows_every_val_metric_and_says_the_shared_overrides_once(tmp_path):
    optuna_like(tmp_path)
    write_summary(tmp_path)
    lines = (tmp_path / "summary.md").read_text().splitlines()
    assert lines[:3] == [
        "Best first by val/loss (lower is better).",
        "Common to every job: `hparams_search=digits_optuna trainer.max_steps=60`",
        "",
    ]
    assert lines[3] == (
        "| job | status | optimizer.lr | data.batch_size | model.hidden | best val/loss (min) | step of best "
        "| final val/acc | final val/loss | steps | wall seconds |"
    )
    assert lines[5] == "| 1 | ok | 0.01618 | 16 | [128] | 0.2937 | 20 | 0.89 | 0.2937 | 20 | 12.35 |"
    assert len(lines) == 8


def test_a_metric_to_maximise_names_its_columns_and_ranks_highest_first(tmp_path):
    for name, acc in (("0", 0.7), ("1", 0.9)):
        curve = {10: {"val/acc": acc / 2, "val/loss": 1.0}, 20: {"val/acc": acc, "val/loss": 0.5}}
        write_job(tmp_path, name, [f"seed={name}"], curve, monitor=("val/acc", "max"))
    write_summary(tmp_path)
    header, rows = read_csv(tmp_path / "summary.csv")
    assert header[2:5] == ["seed", "best_val_acc", "mode"]
    ranking = [(row["job"], row["best_val_acc"], row["mode"]) for row in rows]
    assert ranking == [("1", "0.9", "max"), ("0", "0.7", "max")]
    assert "Best first by val/acc (higher is better)." in (tmp_path / "summary.md").read_text()


def test_statuses_and_a_key_only_some_jobs_set(tmp_path):
    write_job(tmp_path, "0", ["optimizer.lr=0.01"], losses(0.5))
    write_job(tmp_path, "1", ["optimizer.lr=0.01", "+data.dataset.fail=true"], {}, status="failed")
    write_job(tmp_path, "2", ["optimizer.lr=0.01"], losses(0.9), status=None)  # killed: no result.json
    runs = write_summary(tmp_path)
    assert [(run.name, run.status) for run in runs] == [("0", "ok"), ("2", "incomplete"), ("1", "failed")]
    header, rows = read_csv(tmp_path / "summary.csv")
    assert header[:3] == ["job", "status", "data.dataset.fail"]  # optimizer.lr is the same everywhere
    assert [row["data.dataset.fail"] for row in rows] == ["", "", "true"]
    assert rows[2]["best_val_loss"] == rows[2]["step_of_best"] == ""
    assert "Common to every job: `optimizer.lr=0.01`" in (tmp_path / "summary.md").read_text()


def test_damaged_records_are_skipped_with_one_warning_each(tmp_path, capsys):
    write_job(tmp_path, "0", ["seed=0"], losses(0.5))
    write_job(tmp_path, "1", ["seed=1"], losses(0.7))
    (tmp_path / "1" / ".hydra" / "overrides.yaml").write_text("- seed=1\n  bad: [")
    (tmp_path / "1" / "run.yaml").write_text("just a string")
    runs = write_summary(tmp_path)
    assert [run.name for run in runs] == ["0", "1"]
    warnings = capsys.readouterr().err.splitlines()
    assert len(warnings) == 2 and all(line.startswith("runner: warning: skipping ") for line in warnings)
    assert {line.removeprefix("runner: warning: skipping ").split(": ")[0] for line in warnings} == {
        str(tmp_path / "1" / ".hydra" / "overrides.yaml"), str(tmp_path / "1" / "run.yaml")
    }  # fmt: skip
    assert (tmp_path / "summary.png").read_bytes()[:4] == b"\x89PNG"


def plotted(tmp_path: Path):
    """The figure ``summary.png`` is drawn from, for the sweep in ``tmp_path``."""
    return draw_curves(summarise(tmp_path)).axes[0]


def test_the_legend_names_each_job_by_its_rounded_swept_settings(tmp_path):
    optuna_like(tmp_path)
    axes = plotted(tmp_path)
    legend = axes.get_legend()
    assert legend.get_title().get_text() == "job: swept settings (best first)"
    assert [text.get_text() for text in legend.get_texts()] == [
        "best: job 1, val/loss 0.2937 at step 20",
        "1: optimizer.lr=0.01618, data.batch_size=16, model.hidden=[128]",
        "0: optimizer.lr=0.002288, data.batch_size=16, model.hidden=[64]",
        "2: optimizer.lr=0.00015, data.batch_size=64, model.hidden=[128]",
    ]


def test_the_x_axis_is_samples_seen_when_batch_sizes_differ(tmp_path):
    optuna_like(tmp_path)  # batch sizes 16, 16, 64
    axes = plotted(tmp_path)
    assert axes.get_xlabel() == "samples seen (optimizer steps x effective batch size)"
    lines = {line.get_label().split(":")[0]: list(line.get_xdata()) for line in axes.get_lines()}
    assert lines["1"] == [160, 320] and lines["2"] == [640, 1280]
    assert lines["best"] == [320]


def test_the_x_axis_is_optimizer_steps_when_every_job_has_the_same_batch(tmp_path):
    write_job(tmp_path, "0", ["optimizer.lr=0.001"], losses(0.9, 0.8), batch=64)
    write_job(tmp_path, "1", ["optimizer.lr=0.01"], losses(0.5, 0.4), batch=64)
    axes = plotted(tmp_path)
    assert axes.get_xlabel() == "optimizer step (effective batch size 64 in every job)"
    assert [list(line.get_xdata()) for line in axes.get_lines()][:2] == [[10, 20], [10, 20]]


def test_a_slow_job_beside_fast_ones_gets_a_log_axis(tmp_path):
    write_job(tmp_path, "0", ["optimizer.lr=0.0001"], losses(2.3, 2.2))
    write_job(tmp_path, "1", ["optimizer.lr=0.01"], losses(0.5, 0.1))
    assert plotted(tmp_path).get_yscale() == "log"


def test_a_sweep_of_real_jobs_with_different_batch_sizes(train_here, tmp_path):
    """Two jobs trained here, as a sweep's jobs are; Hydra's overrides.yaml written as it writes it."""
    sweep = tmp_path / "sweep"
    for name, batch in (("0", 16), ("1", 32)):
        overrides = [f"data.batch_size={batch}", "trainer.max_steps=4"]
        train_here(*TINY, *overrides, "trainer.val_every_n_steps=2", run_dir=sweep / name)
        (sweep / name / ".hydra").mkdir()
        (sweep / name / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    write_summary(sweep)
    header, rows = read_csv(sweep / "summary.csv")
    assert header[:3] == ["job", "status", "data.batch_size"]
    assert {"best_val_loss", "final_val_acc", "final_val_loss", "final_train_loss"} <= set(header)
    assert "final_val_loss_best" not in header  # the running best is the best column already
    assert sorted(row["data.batch_size"] for row in rows) == ["16", "32"]
    assert [row["steps"] for row in rows] == ["4", "4"]
    axes = plotted(sweep)
    assert axes.get_xlabel().startswith("samples seen")
    assert max(max(line.get_xdata()) for line in axes.get_lines()) == 4 * 32


def test_a_single_run_is_summarised_with_all_its_overrides(tmp_path):
    run = write_job(tmp_path, "run", ["optimizer.lr=0.0022881136684755237", "seed=3"], losses(0.9, 0.4))
    write_summary(run)
    lines = (run / "summary.md").read_text().splitlines()
    assert lines[0] == "Overrides: `optimizer.lr=0.002288 seed=3`"
    assert lines[2].startswith("| job | status | best val/loss (min) |")
    assert read_csv(run / "summary.csv")[1][0]["best_val_loss"] == "0.4"


def test_a_resumed_run_is_summarised_with_the_overrides_it_last_ran_with(tmp_path):
    run = write_job(tmp_path, "run", ["trainer.max_steps=200", "seed=3"], losses(0.9, 0.4))
    resume = run / ".hydra" / "resume-2026-12-03_10-00-00"
    resume.mkdir()
    (resume / "overrides.yaml").write_text(
        yaml.safe_dump(["seed=3", "trainer.max_steps=400", f"resume={run}/checkpoints/last.pt"])
    )
    write_summary(run)
    assert (run / "summary.md").read_text().splitlines()[0] == "Overrides: `seed=3 trainer.max_steps=400`"


def logging_time(event_file: Path) -> float:
    """First to last event of one process's event file, read with TensorBoard's own loader."""
    times = [event.wall_time for event in EventFileLoader(str(event_file)).Load()]
    return max(times) - min(times)


def test_a_resumed_runs_wall_time_is_the_sum_over_its_processes(train_here):
    """Trained, then resumed for longer: the time between the two is not the run's. The last process's
    recorded time (result.json, as the CLI writes it) plus the earlier process's logging time."""
    run_dir = train_here(*TINY)
    (first,) = event_files(run_dir)
    train_here(*TINY, "trainer.max_steps=6", f"resume={run_dir / 'checkpoints' / 'last.pt'}", run_dir=run_dir)
    (second,) = set(event_files(run_dir)) - {first}
    (run,) = write_summary(run_dir)
    assert run.wall_seconds == pytest.approx(logging_time(first) + logging_time(second))  # no result.json
    write_result(run_dir, "ok", 1.5, best=0.1)
    (run,) = write_summary(run_dir)
    assert run.wall_seconds == pytest.approx(1.5 + logging_time(first), abs=1e-3)
