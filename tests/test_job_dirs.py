"""A sweep job's directory (its TensorBoard run's name): its number, zero-padded so that listing by name
lists the jobs in order, then the settings the sweep varies; and every way of finding a job by its
number (``<sweep dir>/3``, a continued sweep) finds it."""

from pathlib import Path

import pytest
from conftest import TINY
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf, open_dict, read_write

from runner.checkpoint.locate import checkpoint_to_evaluate, locate_checkpoint
from runner.cli.arguments import CommandLine, quoted
from runner.cli.hydra.hydra_app import CONFIG_DIR
from runner.cli.hydra.sweep_job_dirs import sweep_plan
from runner.cli.train import with_resume
from runner.config.job_dirs import NAME_BYTES, find_job_dir, job_dir_name, job_number, numbered
from runner.tools.job_files import find_runs


def hydra_config(*overrides: str, **hydra: object):
    """The real composed config with Hydra's node, as Hydra hands it to a job (``hydra``: its values)."""
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        config = compose("config", overrides=list(overrides), return_hydra_config=True)
    with read_write(config), open_dict(config):
        for key, value in hydra.items():
            OmegaConf.update(config, f"hydra.{key}", value)
    return config


def job_of(sweep: list[str], job: list[str], number: int, sweep_dir: Path, *sweeper: str) -> str:
    """The directory name Hydra gives job ``number`` of the sweep ``sweep``: as Hydra does, the sweep's
    config is set up first (its callbacks resolved), and the job's is composed with its cache."""
    master = hydra_config(*sweeper, **{"overrides.task": sweep})
    OmegaConf.select(master, "hydra.callbacks.sweep_overrides.overrides")  # Hydra instantiates it
    config = hydra_config(*sweeper, *job, **{"job.num": number, "sweep.dir": str(sweep_dir)})
    OmegaConf.copy_cache(from_config=master, to_config=config)
    return OmegaConf.select(config, "hydra.sweep.subdir")


def test_a_grid_jobs_directory_names_its_number_and_the_swept_settings_only(tmp_path):
    sweep = ["optimizer.lr=0.001,0.01", "trainer.max_steps=4", "seed=0,1"]
    job = ["optimizer.lr=0.01", "trainer.max_steps=4", "seed=1"]
    assert job_of(sweep, job, 3, tmp_path) == "003_optimizer.lr=0.01,seed=1"
    # A job composed without the sweep's command line (no callback resolved it) is named by number.
    alone = hydra_config(*job, **{"job.num": 3, "sweep.dir": str(tmp_path)})
    assert OmegaConf.select(alone, "hydra.sweep.subdir") == "003"


def test_a_searchs_jobs_are_named_by_its_params_and_the_trials_padding(tmp_path):
    search = ("hparams_search=digits_optuna", "hydra.sweeper.n_trials=1200")
    job = ["optimizer.lr=0.0012345678901234567", "data.batch_size=32", "model.hidden=[64]"]
    assert job_of(["hparams_search=digits_optuna"], job, 7, tmp_path, *search) == (
        "0007_optimizer.lr=0.001235,data.batch_size=32,model.hidden=64"
    )
    # A key fixed on the command line is not searched: not in the name.
    fixed = ["hparams_search=digits_optuna", "data.batch_size=16"]
    assert job_of(fixed, [*job[::2], "data.batch_size=16"], 7, tmp_path, *search) == (
        "0007_optimizer.lr=0.001235,model.hidden=64"
    )


def test_a_continued_sweep_finds_each_jobs_directory_by_its_number(tmp_path):
    """Named by number only (as sweeps were before, or by hand), or with other digits: the job keeps it."""
    (tmp_path / "3").mkdir()
    sweep, job = ["seed=0,1,2,3"], ["seed=3"]
    assert job_of(sweep, job, 3, tmp_path) == "3"
    assert job_of(sweep, ["seed=2"], 2, tmp_path) == "002_seed=2"


def test_job_numbers_are_padded_so_that_names_list_in_job_order():
    names = [job_dir_name(number, 1001, [("seed", str(number))]) for number in range(1001)]
    assert sorted(names) == names and names[7] == "0007_seed=7" and names[1000] == "1000_seed=1000"
    assert job_dir_name(3, 4, []) == "003" and job_dir_name(12, 0, []) == "012"  # 0: the count is unknown
    assert [job_number(name) for name in ("0007_seed=7", "3", "12_x", "x_3", "2026-12-04")] == [
        7,
        3,
        12,
        None,
        None,
    ]


def test_a_job_directory_name_is_one_safe_folder_name():
    name = job_dir_name(
        5,
        10,
        [("model", "hf/gpt2"), ("+data.path", "'/a b/c'"), ("model.hidden", "[32, 16]"), ("x", "a*b?$")],
    )
    assert name == "005_model=hf_gpt2,data.path=_a_b_c,model.hidden=32,16,x=a_b__"
    long = job_dir_name(5, 10, [(f"model.layer{index}.width", "1234567") for index in range(30)])
    assert len(long.encode()) <= NAME_BYTES and long.startswith("005_model.layer0.width=1234567,")


@pytest.mark.parametrize(
    "sweep, sweeper, swept, jobs",
    [
        (
            ["optimizer.lr=0.001,0.01", "seed=range(3)", "trainer.max_steps=4"],
            {},
            {"optimizer.lr", "seed"},
            6,
        ),
        (["seed=1"], {"params": {"seed": "1,2", "optimizer.lr": "0.1,0.2"}}, {"optimizer.lr"}, 2),
        (
            [],
            {"params": {"optimizer.lr": "tag(log, interval(1e-4, 1e-1))"}, "n_trials": 20},
            {"optimizer.lr"},
            20,
        ),
    ],
)
def test_the_swept_keys_and_the_job_count(sweep, sweeper, swept, jobs):
    assert sweep_plan(sweep, sweeper) == (swept, jobs)


def test_a_job_is_found_by_its_number(tmp_path):
    for name in ("000_seed=0", "001_seed=1", "12", "notes"):
        (tmp_path / name).mkdir()
    assert find_job_dir(tmp_path, 1) == tmp_path / "001_seed=1"
    assert find_job_dir(tmp_path, 12) == tmp_path / "12" and find_job_dir(tmp_path, 2) is None
    assert numbered(tmp_path / "1") == tmp_path / "001_seed=1"
    assert numbered(tmp_path / "0" / "checkpoints") == tmp_path / "0" / "checkpoints"  # only a job's own path
    assert numbered(tmp_path / "9") == tmp_path / "9"


def test_resume_eval_and_report_take_a_sweep_job_by_its_number(train_here, tmp_path):
    sweep = tmp_path / "sweep"
    for number, seed in ((10, 1), (2, 2)):
        job = train_here(
            *TINY, f"seed={seed}", run_dir=sweep / job_dir_name(number, 11, [("seed", str(seed))])
        )
        (job / ".hydra").mkdir()
    (sweep / "9" / ".hydra").mkdir(parents=True)  # named as sweeps were before
    job = sweep / "010_seed=1"
    assert locate_checkpoint(str(sweep / "10"), tmp_path).run_dir == job
    assert checkpoint_to_evaluate(sweep / "10") == job / "checkpoints" / "best.pt"
    assert [path.name for path in find_runs(sweep)] == ["002_seed=2", "9", "010_seed=1"]


def test_a_path_with_the_characters_of_hydras_syntax_is_one_override():
    """A job directory as a shell completes it: ``resume=`` takes it as it is, and a resume's rewritten
    command line quotes it for Hydra."""
    path = "outputs/multirun/x/003_optimizer.lr=0.01,seed=1"
    command_line = CommandLine.parse([f"resume={path}"])
    (override,) = command_line.overrides
    assert override.key_or_group == "resume" and override.value() == path and not override.is_sweep_override()
    for text in (path + "/checkpoints/last.pt", "/a b/it's", "/tmp/q\\", "plain/path-1.pt"):
        (parsed,) = CommandLine.parse([f"hydra.run.dir={quoted(text)}"]).overrides
        assert parsed.value() == text
    assert quoted("plain/path-1.pt") == "plain/path-1.pt"


def test_a_resume_of_a_job_named_by_its_settings_continues_in_that_directory(train_here, tmp_path):
    """``resume=<job dir>`` as a shell completes it: the rewritten command line gives Hydra the job's own
    directory and checkpoint, whatever characters of Hydra's syntax the name holds."""
    job = train_here(
        *TINY, "optimizer.lr=0.01", "seed=1", run_dir=tmp_path / "sweep" / "003_optimizer.lr=0.01,seed=1"
    )
    (job / ".hydra").mkdir()
    (job / ".hydra" / "overrides.yaml").write_text("- optimizer.lr=0.01\n- seed=1\n")
    for given in (str(job), str(tmp_path / "sweep" / "3")):
        command_line, found = with_resume(
            CommandLine.parse([f"resume={given}", "trainer.max_steps=6"]), set()
        )
        assert found.run_dir == job
        values = {override.key_or_group: override.value() for override in command_line.overrides}
        assert values["hydra.run.dir"] == str(job) and values["resume"] == str(found.path)
        assert values["optimizer.lr"] == 0.01 and values["seed"] == 1 and values["trainer.max_steps"] == 6
