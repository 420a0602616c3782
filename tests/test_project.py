"""A project of one's own (issue 31): ``runner init``, the project found from its pyproject.toml, data
configs' default metrics, the messages that point the right way, and the Python API. The slow tests run
the real CLI in a project ``runner init`` made, with no PYTHONPATH and no hydra.searchpath."""

import json
import os
import shlex
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml
from conftest import composed, run_cli
from test_one_line_errors import one_error_line, run_limited

from runner.cli.main import main
from runner.cli.resume_line import check_same_project, folder_hint
from runner.config.errors import ConfigError
from runner.config.project import find_project
from runner.tools.scaffold import create_project, files_of

WAVE = """
import math

import torch
from torch import nn
from torch.utils.data import TensorDataset


class WaveNet(nn.Module):
    def __init__(self, input_shape: list[int], num_outputs: int, hidden: int = 16):
        super().__init__()
        self.hidden = nn.Linear(math.prod(input_shape), hidden)
        self.out = nn.Linear(hidden, num_outputs)

    def forward(self, inputs):
        return self.out(torch.tanh(self.hidden(inputs)))


def sine_wave(num_train: int = 64, num_val: int = 32):
    generator = torch.Generator().manual_seed(0)

    def draw(count):
        x = torch.rand(count, 1, generator=generator) * 6 - 3
        return TensorDataset(x, torch.sin(x))

    return draw(num_train), draw(num_val)
"""
WAVE_MODEL = """_target_: lab.wave.WaveNet
input_shape: ${data.input_shape}
num_outputs: ${data.num_outputs}
"""
WAVE_DATA = """defaults:
  - base_data
  - /loss@_global_.loss: mse
  - override /metrics@_global_.metrics: none
  - _self_

dataset:
  _target_: lab.wave.sine_wave
input_shape: [1]
num_outputs: 1
"""
TINY_WAVE = ("model=wave_net", "data=wave", "data.batch_size=32")


def user_environment() -> dict[str, str]:
    """The environment of a shell a user types in: no PYTHONPATH, no project named by a parent."""
    environment = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RUNNER_PROJECT")}
    return {**environment, "OMP_NUM_THREADS": "1"}


# --- the quick lane: in this process -------------------------------------------------------------


def test_the_nearest_pyproject_with_a_runner_table_is_the_project(tmp_path):
    (tmp_path / "conf").mkdir()
    (tmp_path / "pyproject.toml").write_text('[tool.runner]\ndefaults = {model = "cnn"}\n')
    inner = tmp_path / "pkg" / "deeper"
    inner.mkdir(parents=True)
    (tmp_path / "pkg" / "pyproject.toml").write_text('[project]\nname = "pkg"\n')  # no [tool.runner]
    project = find_project(inner)
    assert project is not None and project.root == tmp_path.resolve()
    assert project.conf == (tmp_path / "conf").resolve() and project.code == tmp_path.resolve()
    assert project.defaults == {"model": "cnn"}
    (tmp_path / "pyproject.toml").write_text('[tool.runner]\nconfig = "conf"\n')
    with pytest.raises(ConfigError, match=r"toml: \[tool.runner\] has no key config; it takes conf"):
        find_project(inner)
    (tmp_path / "pyproject.toml").write_text('[tool.runner]\nconf = "configs"\n')
    with pytest.raises(ConfigError, match=r"names the config folder .*configs, which does not exist"):
        find_project(inner)


def test_init_writes_a_project_and_refuses_a_folder_that_is_not_empty(tmp_path, capsys):
    written = create_project(tmp_path / "my-lab")
    names = {str(path.relative_to(tmp_path / "my-lab")) for path in written}
    assert {"pyproject.toml", "src/my_lab/models.py", "conf/model/my_lab_net.yaml"} <= names
    assert "tests/test_train.py" in names
    project = find_project(tmp_path / "my-lab" / "src")
    assert project is not None and project.defaults == {"model": "my_lab_net", "data": "my_lab_data"}
    with pytest.raises(SystemExit) as stop:
        main(["init", str(tmp_path / "my-lab")])
    assert stop.value.code == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "it is a folder that is not empty" in error


def made_files(folder: Path) -> list[Path]:
    return [path for path in folder.rglob("*") if path.is_file()]


@pytest.mark.slow
def test_init_on_a_full_disk_leaves_nothing_behind_and_the_same_command_then_works(tmp_path):
    """``ulimit -f 0`` (the kernel refuses to grow a file, as a full disk does): one line, no folder or
    half-written file left (which would make the retry refuse a folder that is not empty)."""
    for place in (tmp_path / "new", tmp_path / "empty"):
        (place / "lab" if place.name == "empty" else place).mkdir(parents=True)
        line = one_error_line(run_limited(0, "init", "lab", cwd=place))
        assert line == (
            f"runner: error: init lab: cannot write {Path('lab', 'pyproject.toml')}: File too large; nothing "
            "was left behind: free space (or make the place writable) and run it again"
        )
        assert [path.relative_to(place) for path in place.rglob("*")] == (
            [Path("lab")] if place.name == "empty" else []
        )
        made = run_cli("init", "lab", cwd=place)
        assert made.returncode == 0, made.stderr
        assert {
            str(path.relative_to(place / "lab")): path.read_text() for path in made_files(place / "lab")
        } == (files_of("lab", "lab"))


def test_a_data_config_sets_the_default_metrics_and_the_command_line_still_chooses():
    assert set(composed().metrics) == {"acc"}  # runner's digits: accuracy
    assert composed("data=regression").metrics == {}  # a regression asks for none
    assert set(composed("data=regression", "metrics=perplexity").metrics) == {"ppl"}
    assert set(composed("data=classification", "metrics=none").metrics) == set()


def test_a_key_the_target_does_not_take_suggests_its_closest_argument(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["train", "optimizer.learning_rate=0.01"])
    assert stop.value.code == 2
    error = capsys.readouterr().err.strip()
    assert "did you mean optimizer.lr (an argument of torch.optim.Adam)?" in error
    assert error.endswith("To add learning_rate anyway, use +optimizer.learning_rate=0.01")
    with pytest.raises(SystemExit):
        main(["train", "optimizer=sgd", "optimizer.mometum=0.9"])
    assert "did you mean optimizer.momentum" in capsys.readouterr().err


def test_the_closest_argument_is_an_abbreviation_or_a_near_spelling():
    import torch

    from runner.config.closest import closest_name, unexpected_argument_hint

    assert closest_name("learning_rate", ["params", "lr", "betas"]) == "lr"
    assert closest_name("wd", ["lr", "weight_decay"]) == "weight_decay"
    assert closest_name("mometum", ["lr", "momentum", "dampening"]) == "momentum"
    assert closest_name("colour", ["lr", "momentum"]) is None
    try:
        torch.optim.SGD([torch.zeros(1, requires_grad=True)], learning_rate=0.1)
    except TypeError as error:
        hint = unexpected_argument_hint("optimizer", "torch.optim.SGD", error)
    assert hint == "; optimizer.lr is its argument closest to learning_rate"


def recorded(run_dir: Path, provider: str, folder: Path) -> None:
    sources = [{"path": "/x", "schema": "file", "provider": "main"},
               {"path": str(folder), "schema": "file", "provider": provider}]  # fmt: skip
    (run_dir / ".hydra").mkdir(parents=True)
    record = {"hydra": {"runtime": {"config_sources": sources}}}
    (run_dir / ".hydra" / "hydra.yaml").write_text(yaml.safe_dump(record))


def test_a_resume_that_needs_a_config_folder_names_it(tmp_path):
    conf = tmp_path / "project" / "conf"
    (conf / "data").mkdir(parents=True)
    (conf / "data" / "wave.yaml").write_text("{}")
    recorded(tmp_path / "searchpath_run", "hydra.searchpath", conf)
    hint = folder_hint(tmp_path / "searchpath_run", "data", "wave")
    assert f"data=wave is in the config folder {conf}" in hint and f"hydra.searchpath=[file://{conf}]" in hint
    recorded(tmp_path / "project_run", "runner-project", conf)
    assert f"run this command from that project's folder ({conf.parent})" in folder_hint(
        tmp_path / "project_run", "data", "wave"
    )
    with pytest.raises(ConfigError, match=rf"started in the project {conf.parent} .* run it from"):
        check_same_project(tmp_path / "project_run", "latest", None)
    check_same_project(tmp_path / "project_run", "latest", conf)  # from the project: nothing to say


def test_lr_find_takes_its_range_and_steps_as_flags():
    from runner.cli.arguments import CommandLine
    from runner.cli.tools import lr_find_range

    assert lr_find_range(CommandLine.parse([])) == {"--min-lr": 1e-6, "--max-lr": 10.0, "--steps": 100}
    chosen = lr_find_range(CommandLine.parse(["--min-lr=1e-8", "--steps=300", "optimizer=sgd"]))
    assert chosen == {"--min-lr": 1e-8, "--max-lr": 10.0, "--steps": 300}
    with pytest.raises(ConfigError, match=r"--steps=1: --steps takes a whole number >= 2"):
        lr_find_range(CommandLine.parse(["--steps=1"]))
    with pytest.raises(ConfigError, match=r"--min-lr=1 must be below --max-lr=0.1"):
        lr_find_range(CommandLine.parse(["--min-lr=1", "--max-lr=0.1"]))


# --- the slow lane: the real CLI in a project runner init made -----------------------------------


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> Path:
    """``runner init lab``, then a model and a data set of the user's own, added as the scaffold shows."""
    place = tmp_path_factory.mktemp("projects")
    made = run_cli("init", "lab", cwd=place, env=user_environment())
    assert made.returncode == 0, made.stderr
    project = place / "lab"
    (project / "src" / "lab" / "wave.py").write_text(WAVE)
    (project / "conf" / "model" / "wave_net.yaml").write_text(WAVE_MODEL)
    (project / "conf" / "data" / "wave.yaml").write_text(WAVE_DATA)
    return project


def in_project(*arguments: str, cwd: Path) -> subprocess.CompletedProcess:
    result = run_cli(*arguments, cwd=cwd, env=user_environment())
    assert result.returncode == 0, result.stderr
    return result


@pytest.mark.slow
def test_a_project_trains_resumes_evaluates_and_sweeps_by_its_group_names(lab):
    """No PYTHONPATH, no hydra.searchpath: a Ctrl-C's printed resume command, resume=latest, eval of
    a run directory (from a folder below the project's) and a joblib sweep."""
    stopped = lab / "outputs" / "stopped"
    command = [sys.executable, "-m", "runner", "train", *TINY_WAVE, "trainer.max_epochs=10",
               "checkpoint.every_n_steps=1", f"hydra.run.dir={stopped}"]  # fmt: skip
    process = subprocess.Popen(command, cwd=lab, env=user_environment(), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)  # fmt: skip
    while not (stopped / "checkpoints" / "step_00000002.pt").exists():
        assert process.poll() is None, process.communicate()
        time.sleep(0.01)
    process.send_signal(signal.SIGINT)
    out, _ = process.communicate(timeout=120)
    printed = out.split("resume with: ", 1)[1].splitlines()[0]
    assert printed == f"python -m runner train resume={stopped}"
    line = printed.replace("python", shlex.quote(sys.executable), 1)
    pasted = subprocess.run(["bash", "-c", line], cwd=lab, env=user_environment(), capture_output=True,
                            text=True, timeout=240)  # fmt: skip
    assert pasted.returncode == 0, pasted.stderr
    assert json.loads((stopped / "result.json").read_text())["step"] == 20

    resumed = in_project("train", "resume=latest", "trainer.max_epochs=11", cwd=lab)  # 2 steps more
    assert f"resumed from     {stopped}" in resumed.stdout
    result = json.loads((stopped / "result.json").read_text())
    assert result["status"] == "ok" and result["monitor"] == "val/loss" and result["step"] == 22
    assert set(result["final"]) == {"val/loss"}  # a regression: no accuracy, no metrics=none needed
    evaluated = in_project("eval", f"ckpt={stopped}", cwd=lab / "src")
    assert "val/loss" in evaluated.stdout and "val/acc" not in evaluated.stdout

    sweep = lab / "outputs" / "sweep"
    in_project("train", "-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", *TINY_WAVE,
               "trainer.max_steps=2", "optimizer.lr=0.01,0.1", f"hydra.sweep.dir={sweep}",
               cwd=lab)  # fmt: skip
    results = [json.loads(path.read_text()) for path in sorted(sweep.glob("*/result.json"))]
    assert [r["status"] for r in results] == ["ok", "ok"]


NOTEBOOK = """
import json, torch, runner

result = runner.train(["model=wave_net", "data=wave", "trainer.max_steps=3", "hydra.run.dir=notebook_run"])
model = runner.load_model(result.run_dir)
with torch.no_grad():
    prediction = model(torch.zeros(2, 1))
errors = []
for overrides in (["optimizer.learning_rate=0.01"], ["model=no_such_model"], ["-m", "seed=1,2"]):
    try:
        runner.train(overrides)
    except runner.UserError as error:
        errors.append(str(error))
try:
    runner.load_model("outputs/no_such_run")
except runner.UserError as error:
    errors.append(str(error))
print(json.dumps({"run_dir": str(result.run_dir), "status": result.status, "monitor": result.monitor,
                  "best": result.best, "best_step": result.best_step, "final": result.final,
                  "type": type(model).__name__, "training": model.training,
                  "shape": list(prediction.shape), "errors": errors}))
"""


@pytest.mark.slow
def test_runner_train_and_load_model_from_a_notebook_like_script(lab):
    script = lab / "notebook.py"
    script.write_text(textwrap.dedent(NOTEBOOK))
    ran = subprocess.run([sys.executable, str(script)], cwd=lab, env=user_environment(),
                         capture_output=True, text=True, timeout=240)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    seen = json.loads(ran.stdout.strip().splitlines()[-1])
    assert seen["status"] == "ok" and seen["monitor"] == "val/loss" and seen["best_step"] in (2, 3)
    assert set(seen["final"]) == {"val/loss"} and seen["best"] <= seen["final"]["val/loss"]
    assert seen["type"] == "WaveNet" and seen["training"] is False and seen["shape"] == [2, 1]
    assert Path(seen["run_dir"]) == lab / "notebook_run"  # outside outputs/: resume=latest looks there
    learning_rate, no_model, sweep, no_run = seen["errors"]
    assert "did you mean optimizer.lr" in learning_rate
    assert "model=no_such_model: no such option" in no_model and "wave_net" in no_model
    assert "runner.train runs one training" in sweep
    assert "no such run directory or checkpoint" in no_run
    assert "Traceback" not in ran.stderr
