"""runner's Optuna search in-process: the search space from Hydra's sweep syntax, the settings it
refuses, a job's link to its trial (a real study and pruner), sweep directories that continue, one GPU
per parallel job, and the Pareto front in the summary. Through the real CLI: tests/test_sweeps.py."""

import dataclasses
import json
import threading
import time

import optuna
import pytest
import yaml
from conftest import REPO
from omegaconf import OmegaConf

from runner.cli.hydra.optuna_space import search_space
from runner.cli.main import main
from runner.config.errors import ConfigError
from runner.search.claims import claimed_gpu
from runner.search.continuation import OtherJobInTheWay, earlier_job
from runner.search.options import TYPES
from runner.search.settings import objectives_of, typed
from runner.search.storage import open_storage, storage_url
from runner.search.trial import SearchTrial, TrialLink, link_to_trial
from runner.search.trials import name_objectives
from runner.tools.run_summary import summarise
from runner.training.callbacks import Context

Float, Int, Categorical = (
    optuna.distributions.FloatDistribution,
    optuna.distributions.IntDistribution,
    optuna.distributions.CategoricalDistribution,
)


def test_hydra_sweep_syntax_becomes_optuna_distributions():
    space = search_space(
        {"optimizer.lr": "tag(log, interval(1e-4, 3e-2))", "model.hidden": "choice([32], [64])",
         "data.batch_size": "range(16, 65, 16)", "model.dropout": "interval(0.0, 0.5)", "optimizer": "adamw"},
        ["trainer.max_steps=20"],
    )  # fmt: skip
    assert space.distributions == {
        "optimizer.lr": Float(1e-4, 3e-2, log=True),
        "model.hidden": Categorical(["[32]", "[64]"]),
        "data.batch_size": Int(16, 64, step=16),  # Hydra's range leaves out its end, as Python's does
        "model.dropout": Float(0.0, 0.5),
    }
    assert space.fixed == ["optimizer=adamw", "trainer.max_steps=20"]
    assert space.overrides({"optimizer.lr": 0.001, "model.hidden": "[64]"}) == [
        "optimizer.lr=0.001", "model.hidden=[64]", "optimizer=adamw", "trainer.max_steps=20",
    ]  # fmt: skip
    grid = search_space({"model.hidden": "choice([32], [64])", "data.batch_size": "range(16, 65, 16)"}, [])
    assert grid.grid() == {"model.hidden": ["[32]", "[64]"], "data.batch_size": [16, 32, 48, 64]}


def test_a_key_fixed_on_the_command_line_is_not_searched():
    space = search_space({"optimizer.lr": "interval(1e-4, 1e-2)", "data.batch_size": "choice(16, 32)"},
                         ["data.batch_size=64"])  # fmt: skip
    assert list(space.distributions) == ["optimizer.lr"]
    assert space.fixed == ["data.batch_size=64"]


@pytest.mark.parametrize(
    ("params", "says"),
    [
        ({"optimizer.lr": "tag(log, interval(0, 1e-2))"}, "a log scale needs 0 < low < high"),
        ({"optimizer.lr": "interval(0.1, 0.01)"}, "interval(0.1, 0.01) is empty"),
        ({}, "nothing to search"),
    ],
)
def test_a_search_space_that_cannot_work_is_refused_naming_the_key(params, says):
    with pytest.raises(ConfigError, match=says.replace("(", r"\(").replace(")", r"\)")):
        search_space(params, [])


def test_only_settings_of_this_search_are_taken_back_from_the_study():
    space = search_space({"optimizer.lr": "interval(1e-4, 1e-2)", "model.hidden": "choice([32], [64])"}, [])
    assert space.holds({"optimizer.lr": 1e-3, "model.hidden": "[64]"})
    assert not space.holds({"optimizer.lr": 0.5, "model.hidden": "[64]"})  # outside the interval
    assert not space.holds({"optimizer.lr": 1e-3, "model.hidden": "[4096]"})
    assert not space.holds({"optimizer.lr": 1e-3, "model.hidden": "[64]", "model._target_": "os.system"})


def test_the_grid_sampler_takes_no_interval():
    with pytest.raises(ConfigError, match="the grid sampler takes choice"):
        search_space({"optimizer.lr": "interval(1e-4, 1e-2)"}, []).grid()


def config_with(monitor="val/loss", mode="min"):
    return OmegaConf.create({"checkpoint": {"monitor": monitor, "mode": mode}})


def test_objectives_default_to_the_monitored_metric_and_must_agree_with_its_mode():
    assert objectives_of(None, ["minimize"], config_with()) == ["val/loss"]
    assert objectives_of(["val/loss", "val/acc"], ["minimize", "maximize"], config_with()) == [
        "val/loss", "val/acc",
    ]  # fmt: skip
    with pytest.raises(ConfigError, match=r"direction=maximize for val/loss, but checkpoint\.mode=min"):
        objectives_of(None, ["maximize"], config_with())
    with pytest.raises(ConfigError, match="lists 2 directions; name the metric each applies to"):
        objectives_of(None, ["minimize", "maximize"], config_with())
    with pytest.raises(ConfigError, match="names 1 metrics for 2 direction"):
        objectives_of(["val/loss"], ["minimize", "maximize"], config_with())
    with pytest.raises(ConfigError, match=r"leaves out checkpoint\.monitor=val/loss"):
        objectives_of(["val/acc"], ["maximize"], config_with())


def validation(callback, step, **metrics):
    context = Context(model=None, optimizer=None, log_scalar=lambda *_: None, step=step,
                      metrics={f"val/{k}": v for k, v in metrics.items()})  # fmt: skip
    callback.on_validation_end(context)
    return context


def test_a_job_keeps_the_metrics_of_its_best_validation_and_a_real_pruner_stops_a_bad_trial():
    study = optuna.create_study(pruner=optuna.pruners.MedianPruner(n_startup_trials=1))
    good = study.ask()
    for samples, value in ((320, 0.5), (640, 0.3)):
        good.report(value, samples)
    study.tell(good, 0.3)

    # Steps 10 and 20 of batch size 32: the same data as the finished trial's reports.
    job = SearchTrial("val/loss", "min", TrialLink(study.ask(), "MedianPruner"), samples_per_step=32)
    first = validation(job, 10, loss=0.4, acc=0.7)  # better than the median at step 10: goes on
    assert first.stop_reason is None and job.pruned_at is None
    second = validation(job, 20, loss=0.45, acc=0.8)  # worse than the finished trial at step 20: pruned
    assert job.pruned_at == 20
    assert second.stop_reason == "pruned by the search's MedianPruner (val/loss 0.45)"
    assert job.objectives(["val/loss", "val/acc"]) == {"val/loss": 0.4, "val/acc": 0.7}  # the best one's

    per_epoch = SearchTrial("val/loss", "min")
    context = Context(model=None, optimizer=None, log_scalar=lambda *_: None, step=90, epoch=2)
    assert per_epoch.position(context) == 2  # batch 16 or 64, two epochs are the same data

    resumed = SearchTrial("val/loss", "min")
    resumed.load_state_dict(job.state_dict())  # a continued job keeps what it had found
    validation(resumed, 30, loss=float("nan"), acc=0.9)
    assert resumed.objectives(["val/acc"]) == {"val/acc": 0.7}


def test_a_job_of_a_search_on_a_journal_file_is_pruned_by_another_process_reports(tmp_path):
    """Two sweeper processes' handles on one journal file: the trials one finished, with their reports,
    are what the pruner of the other's job judges by (``link_to_trial`` with ``storage=journal``)."""
    url = storage_url("journal", tmp_path)
    other = optuna.create_study(study_name="runner", storage=open_storage(url))  # another process's
    for job, final in ((0, 0.3), (1, 0.35)):
        trial = other.ask()
        trial.set_user_attr("runner_job", job)
        for step, value in ((1, final + 0.1), (2, final)):
            trial.report(value, step)
        other.tell(trial, final)
    running = other.ask()
    running.set_user_attr("runner_job", 2)

    link = link_to_trial({"storage": "journal"}, optuna.pruners.MedianPruner(n_startup_trials=1), tmp_path, 2)
    assert link is not None and link.trial.number == running.number
    assert not link.should_stop(0.41, 1)  # better than the others' median at step 1 (0.425): goes on
    assert link.should_stop(0.9, 2)  # its best (0.41) worse than their median at step 2 (0.325): pruned
    assert (tmp_path / "optuna.journal").is_file()


def write_job(job_dir, config, result=None):
    job_dir.mkdir(parents=True)
    (job_dir / "run.yaml").write_text(yaml.safe_dump({**config, "runtime": {"seed": 3}}))
    if result is not None:
        (job_dir / "result.json").write_text(json.dumps(result))


def test_a_finished_job_of_the_same_settings_is_found_and_one_of_other_settings_refused(tmp_path):
    config = {"seed": 1, "optimizer": {"lr": 0.01}}
    write_job(tmp_path / "0", config, {"status": "ok", "best": 0.25})
    earlier = earlier_job(tmp_path / "0", config)
    assert earlier.finished and earlier.result["best"] == 0.25
    assert earlier_job(tmp_path / "1", config) is None  # nothing there yet

    write_job(tmp_path / "2", config, {"status": "failed"})
    assert not earlier_job(tmp_path / "2", config).finished  # runs again

    with pytest.raises(OtherJobInTheWay, match=r"optimizer.lr \(0.01 there, 0.1 now\).*own hydra.sweep.dir"):
        earlier_job(tmp_path / "0", {"seed": 1, "optimizer": {"lr": 0.1}})


def test_parallel_jobs_each_claim_their_own_gpu_and_free_it_when_they_end(tmp_path):
    used: list[int] = []
    with claimed_gpu(tmp_path, 2, job=0, use=used.append) as first:
        with claimed_gpu(tmp_path, 2, job=2, use=used.append) as second:  # job 2 would start on GPU 0
            assert {first, second} == {0, 1}
            with claimed_gpu(tmp_path, 2, job=3, use=used.append) as third:
                assert third == 1  # every GPU is held: more jobs at once than GPUs share
        with claimed_gpu(tmp_path, 2, job=4, use=used.append) as after:
            assert after == 1  # GPU 1 was freed when its job ended; GPU 0 is still held
    assert used == [0, 1, 1, 1]


def test_jobs_started_at_once_in_threads_never_share_a_gpu(tmp_path):
    """The lock is on each job's own open file: even at the same instant, two jobs get two GPUs."""
    claimed, barrier = [], threading.Barrier(4)

    def job(number):
        barrier.wait()
        with claimed_gpu(tmp_path, 4, job=0, use=lambda index: None) as index:
            claimed.append(index)
            time.sleep(0.2)

    threads = [threading.Thread(target=job, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(claimed) == [0, 1, 2, 3]


def test_the_summary_of_a_multi_objective_search_marks_its_pareto_front(tmp_path):
    (tmp_path / "optimization_results.yaml").write_text(yaml.safe_dump(
        {"directions": ["minimize", "maximize"], "objectives": ["val/loss", "val/acc"]}
    ))  # fmt: skip
    jobs = {
        "0": (0.3, 0.90, "ok"),
        "1": (0.2, 0.85, "ok"),
        "2": (0.35, 0.80, "ok"),
        "3": (0.1, 0.99, "pruned"),
    }
    for name, (loss, acc, status) in jobs.items():
        (tmp_path / name / ".hydra").mkdir(parents=True)
        result = {"status": status, "best": loss, "objectives": {"val/loss": loss, "val/acc": acc}}
        (tmp_path / name / "result.json").write_text(json.dumps(result))
    sweep = summarise(tmp_path)
    front = {run.name for run in sweep.runs if run.on_pareto_front}
    assert front == {"0", "1"}  # job 2 is beaten by job 0 in both; a pruned job is not a solution


@pytest.mark.parametrize("group", ["sampler", "pruner"])
def test_every_sampler_and_pruner_option_builds_on_the_installed_optuna(group):
    """``hydra/sweeper/sampler=...`` and ``hydra/sweeper/pruner=...``: each option's fields are
    arguments its Optuna class takes, and the search checks the type of every one of them."""
    from hydra.utils import instantiate

    options = sorted((REPO / "conf" / "hydra" / "sweeper" / group).glob("*.yaml"))
    assert len(options) >= 4
    for path in options:
        config = OmegaConf.load(path)
        kind = TYPES[config._target_]
        assert set(config) == {field.name for field in dataclasses.fields(kind)}, path.name
        built = instantiate(typed(f"hydra.sweeper.{group}", config))
        if path.stem == "grid":
            built = built({"optimizer.lr": [1e-3, 1e-2]})
        base = optuna.samplers.BaseSampler if group == "sampler" else optuna.pruners.BasePruner
        assert isinstance(built, base), path.name


def test_a_pruner_by_target_with_some_of_its_arguments_keeps_optunas_defaults_for_the_rest():
    """``hydra.sweeper.pruner: {_target_: optuna.pruners.MedianPruner, n_warmup_steps: 5}``, as in a
    preset: the given arguments are typed, the others are left to Optuna."""
    from hydra.utils import instantiate

    given = OmegaConf.create({"_target_": "optuna.pruners.MedianPruner", "n_warmup_steps": "5"})
    checked = typed("hydra.sweeper.pruner", given)
    assert OmegaConf.to_container(checked) == {"_target_": "optuna.pruners.MedianPruner", "n_warmup_steps": 5}
    assert isinstance(instantiate(checked), optuna.pruners.MedianPruner)


def test_a_studys_values_are_named_by_their_metrics_in_its_storage(tmp_path):
    """What optuna-dashboard reads from the database: the objectives' names (tests/test_sweeps.py
    shows the dashboard serving them)."""
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = optuna.create_study(storage=storage, study_name="s", directions=["minimize", "maximize"])
    name_objectives(study, ["val/loss", "val/acc"])
    assert optuna.load_study(study_name="s", storage=storage).metric_names == ["val/loss", "val/acc"]


BAD_PRESET = """# @package _global_
defaults:
  - override /hydra/sweeper: optuna
hydra:
  sweeper:
    params:
      optimizer.lrr: interval(1e-4, 1e-2)
"""


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        (("hydra.sweeper.direction=up",), "hydra.sweeper.direction=up: a direction is minimize or maximize"),
        (
            ("hydra.sweeper.n_trials=0",),
            "hydra.sweeper.n_trials=0 is not allowed; it must be an integer >= 1",
        ),
        (("hydra.sweeper.storage=bogus://nowhere",), "hydra.sweeper.storage=bogus://nowhere: cannot open it"),
        (
            ("hydra/sweeper/pruner=percentile", "hydra.sweeper.pruner.percentile=150"),
            "hydra.sweeper.pruner: ",
        ),
        (("hydra/sweeper/sampler=grid",), "hydra.sweeper.params.optimizer.lr: the grid sampler takes choice"),
        (
            ("hydra.sweeper.sampler.n_startup_trials=ten",),
            "hydra.sweeper.sampler.n_startup_trials: Value 'ten' of type 'str' could not be converted",
        ),
        (
            ("hydra/sweeper/pruner=median", "hydra.sweeper.pruner.n_warmup_steps=soon"),
            "hydra.sweeper.pruner.n_warmup_steps: Value 'soon'",
        ),
        (("hydra.sweeper.pruner=median",), "hydra.sweeper.pruner=median: pick an option with hydra/sweeper/"),
        (("hydra.sweeper.direction=maximize",), "direction=maximize for val/loss, but checkpoint.mode=min"),
        (("hparams_search=bad",), "hydra.sweeper.params.optimizer.lrr: the config has no key optimizer.lrr"),
        (("hydra.sweeper.storage=nosuch://x",), "hydra.sweeper.storage=nosuch://x: cannot open it ("),
        (
            ("hydra.sweeper.storage=postgresql+psycopg://runner@127.0.0.1:1/none",),
            "hydra.sweeper.storage=postgresql+psycopg://runner@127.0.0.1:1/none: cannot open it (",
        ),
        (
            ("hydra.sweeper.storage=journal", "hydra.sweeper.n_trials=0"),
            "hydra.sweeper.n_trials=0 is not allowed",
        ),
    ],
)
def test_a_search_that_cannot_run_is_refused_in_one_line_writing_nothing(
    tmp_path, monkeypatch, capsys, overrides, says
):
    """The real command line (``main``, Hydra's multirun and the Optuna sweeper) in this process: a
    refusal needs no process of its own."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "conf" / "hparams_search").mkdir(parents=True)
    (tmp_path / "conf" / "hparams_search" / "bad.yaml").write_text(BAD_PRESET)
    searchpath = f"hydra.searchpath=[file://{tmp_path / 'conf'}]"
    with pytest.raises(SystemExit) as exited:
        main(["train", "-m", "hparams_search=digits_optuna", *overrides, searchpath, "hydra.sweep.dir=sweep"])
    error = capsys.readouterr().err
    assert exited.value.code == 2, error
    assert error.startswith("runner: error: ") and says in error, error
    assert "Traceback" not in error and len(error.strip().splitlines()) == 1
    assert not (tmp_path / "sweep").exists()
