"""Where a run's time goes: the shares logged between log steps, the end-of-run line and its advice."""

import csv
import math
import os

import pytest
from conftest import TINY, read_scalars

from runner.tools.report import write_summary
from runner.training.time_shares import SHARES, StepTimes, summary

TAGS = [f"vitals/time/{name}" for name in SHARES]
SLOW = ("data.dataset._target_=slow_data.slow_classification", "+data.dataset.seconds_per_item=0.003")


def test_every_log_step_logs_shares_that_sum_to_one(train_here):
    scalars = read_scalars(train_here(*TINY))
    assert all(tag in scalars for tag in TAGS)
    steps = [step for step, _ in scalars["train/loss"]]
    for index, step in enumerate(steps):
        values = [scalars[tag][index] for tag in TAGS]
        assert [at for at, _ in values] == [step] * len(TAGS)
        assert math.fsum(value for _, value in values) == pytest.approx(1.0, abs=1e-5)
        assert all(0.0 <= value <= 1.0 for _, value in values)


def test_a_run_slow_to_load_its_data_says_so_and_points_at_num_workers(train_here, caplog):
    """Each training sample takes 3 ms to load, 16 of them per step: waiting for data is the largest
    share at every log step after the first (whose batch was read, and checked, before training), and
    the run's last line names data.num_workers and the CPUs there are."""
    scalars = read_scalars(train_here(*TINY, *SLOW))
    for index in range(1, len(scalars["train/loss"])):
        shares = {tag: scalars[tag][index][1] for tag in TAGS}
        assert max(shares, key=shares.get) == "vitals/time/data"
    line = next(message for message in caplog.messages if message.startswith("time: data"))
    assert "raise data.num_workers (now 0" in line
    assert f"this machine has {os.cpu_count()} CPUs" in line


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_each_phase_is_counted_in_its_share_and_the_step_boundaries_are_announced():
    clock, seen = Clock(), []
    times = StepTimes(clock=clock, at_step=[seen.append])

    class State:
        step = 0

    state = State()
    for _window in times.waiting(iter([["a"], ["b"]]), state):
        clock.now += 3.0  # the step computes
        state.step += 1
        times.now_in("validation")
        clock.now += 1.0
        times.now_in("checkpoint")
        clock.now += 0.5
    assert seen == [0, 1, 2]
    assert times.step_compute == [3.0, 3.0]
    shares = times.shares()
    assert shares == pytest.approx(
        {"vitals/time/data": 0.0, "vitals/time/compute": 6 / 9, "vitals/time/validation": 2 / 9,
         "vitals/time/runner": 1 / 9}
    )  # fmt: skip


def test_with_nothing_at_the_step_boundary_a_step_computed_up_to_it_counts_all_its_compute():
    clock = Clock()
    times = StepTimes(clock=clock)

    class State:
        step = 0

    for _window in times.waiting(iter([["a"], ["b"]]), State()):
        clock.now += 2.0  # the step computes, and the loop goes straight on to the next window
    assert times.step_compute == [2.0, 2.0]
    assert times.total["compute"] == 4.0


@pytest.mark.parametrize(
    ("total", "said", "unsaid"),
    [
        ({"data": 8, "compute": 2, "validation": 0, "runner": 0}, "raise data.num_workers", "validate less"),
        ({"data": 0, "compute": 3, "validation": 7, "runner": 0}, "validate less often", "num_workers"),
        ({"data": 0, "compute": 9, "validation": 0, "runner": 1}, "log less often", "num_workers"),
        ({"data": 1, "compute": 97, "validation": 1, "runner": 1}, "time: data 1.0%", "; "),
    ],
)
def test_the_end_line_advises_only_where_a_share_dominates(total, said, unsaid):
    line = summary(total, num_workers=2, cpus=8)
    assert said in line
    assert unsaid not in line


def test_report_shows_each_jobs_time_shares(train_here):
    run_dir = train_here(*TINY, *SLOW)
    write_summary(run_dir)
    with open(run_dir / "summary.csv", newline="") as handle:
        (row,) = list(csv.DictReader(handle))
    shares = {name: float(row[f"time_{name}"]) for name in SHARES}
    assert math.fsum(shares.values()) == pytest.approx(1.0, abs=1e-5)
    assert max(shares, key=shares.get) == "data"
    table = (run_dir / "summary.md").read_text()
    assert "| time data | time compute | time validation | time runner |" in table
    assert f"| {100 * shares['data']:.0f}% |" in table
