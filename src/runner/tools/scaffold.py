"""``runner init NAME``: a project folder the user owns. A package with a model and a data set that
learn, their config groups, a ``pyproject.toml`` that declares the package and runner's settings for
the project (``[tool.runner]``: how runner finds it from any folder below) and makes it installable
(``pip install -e .``, which its README shows: a plain script or notebook then imports it), a README
and a test."""

import contextlib
import keyword
import re
import secrets
import shutil
from pathlib import Path

from runner.config.errors import ConfigError
from runner.config.project import holds_a_run
from runner.config.project_trust import package_taken

PYPROJECT = """[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "{name}"
version = "0.1.0"
requires-python = ">=3.10"
# runner and torch come from the environment runner is installed in.
dependencies = []

[tool.hatch.build.targets.wheel]
packages = ["src/{package}"]

# runner finds this table from this folder or any folder below it: the code in src/ is importable and
# the config groups in conf/ are options beside runner's own, with no PYTHONPATH or hydra.searchpath.
[tool.runner]
conf = "conf"
code = "src"
# What `python -m runner train` trains here; a command line's model=... or data=... still chooses.
defaults = {{model = "{package}_net", data = "{package}_data"}}

[tool.pytest.ini_options]
testpaths = ["tests"]
"""
INIT = '''"""{name}: a model and a data set trained with runner."""
'''
MODELS = '''"""The project's models: any torch.nn.Module; its arguments are the model config's keys."""

import math

import torch
from torch import nn


class TwoLayerNet(nn.Module):
    """A hidden ReLU layer: enough to separate XOR, which no linear model can."""

    def __init__(self, input_shape: list[int], num_outputs: int, hidden: int = 16):
        super().__init__()
        self.hidden = nn.Linear(math.prod(input_shape), hidden)
        self.out = nn.Linear(hidden, num_outputs)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.hidden(inputs.flatten(1))))
'''
DATA = '''"""The project's data: a function that returns (train, val) data sets (or (train, val, test)); its
arguments are the data config's dataset keys."""

import torch
from torch.utils.data import TensorDataset


def xor_blobs(num_train: int = 256, num_val: int = 64, seed: int = 0):
    """Four blobs at the corners of a square; opposite corners share a label."""
    generator = torch.Generator().manual_seed(seed)

    def draw(num_samples: int) -> TensorDataset:
        corners = torch.randint(0, 2, (num_samples, 2), generator=generator)
        inputs = corners.float() * 4 - 2 + 0.5 * torch.randn(num_samples, 2, generator=generator)
        return TensorDataset(inputs, (corners[:, 0] ^ corners[:, 1]).long())

    return draw(num_train), draw(num_val)
'''
MODEL_CONFIG = """# model={package}_net: the model's class and its arguments (the data config describes its
# items).
_target_: {package}.models.TwoLayerNet
input_shape: ${{data.input_shape}}
num_outputs: ${{data.num_outputs}}
hidden: 16
"""
DATA_CONFIG = """# data={package}_data: runner's typed data settings (batch_size, shuffle, ...), this data
# set's default loss (its default metrics are accuracy; a regression adds
# `- override /metrics@_global_.metrics: none`), the function that returns (train, val) and what the
# model configs read of its items.
defaults:
  - base_data
  - /loss@_global_.loss: cross_entropy
  - _self_

dataset:
  _target_: {package}.data.xor_blobs
  num_train: 256
  num_val: 64
input_shape: [2]
num_outputs: 2
"""
TEST = '''"""The project's default experiment trains a few steps, and its trained model loads."""

from pathlib import Path

import runner

PROJECT = Path(__file__).resolve().parents[1]


def test_the_default_experiment_trains_and_its_model_loads(tmp_path):
    result = runner.train(["trainer.max_steps=5", f"hydra.run.dir={{tmp_path / 'run'}}"], project=PROJECT)
    assert result.status == "ok" and result.best is not None
    model = runner.load_model(result.run_dir)
    assert not model.training
'''
README = """# {name}

A model and a data set trained with runner. From this folder (or any folder below it):

```
python -m runner train                  # pyproject.toml's defaults: model={package}_net data={package}_data
python -m runner train model.hidden=32 optimizer.lr=0.01
python -m runner train -m optimizer.lr=0.001,0.01,0.1
python -m runner train resume=latest
python -m runner eval ckpt=outputs/<date>/<time>-<suffix>
python -m pytest                        # tests/test_train.py: trains 5 steps
```

Your own model: a class or function in `src/{package}/` and a file `conf/model/NAME.yaml` naming it
(`_target_: {package}.models.MyNet` and its arguments); then `python -m runner train model=NAME`.
Your own data: a function returning `(train, val)` data sets and `conf/data/NAME.yaml` (copy
`{package}_data.yaml`); then `data=NAME`. From Python: `runner.train([...])`, `runner.load_model(run_dir)`.

## Your code in a plain script or notebook

`python -m runner` finds `src/` by itself (this folder's `pyproject.toml`, `[tool.runner]`). A plain
`python script.py`, a notebook or another tool imports `{package}` once the project is installed in
the environment runner is installed in. Once, from this folder:

```
pip install -e .
```

Editable: your edits count at once, with nothing to reinstall; it installs no other package (runner
and torch are the environment's). Then `import {package}` works from anywhere, and
`runner.load_model(run_dir)` builds a trained `{package}` model.
"""
GITIGNORE = """outputs/
__pycache__/
*.egg-info/
"""


# A project's name goes into pyproject.toml, a docstring and the README as it is: a name as PEP 508
# has it (ASCII letters and digits, with - _ . inside), whose package (- and . as _) is an identifier.
PROJECT_NAME = re.compile(r"[A-Za-z]([A-Za-z0-9._-]*[A-Za-z0-9])?")


def package_name(name: str) -> str:
    """The Python package a project called ``name`` holds: ``my-lab`` -> ``my_lab``. Not one that is
    importable already (``torch``, ``yaml``, ``json``): the project's would hide it in every run."""
    package = re.sub(r"[-.]", "_", name).lower()
    if not PROJECT_NAME.fullmatch(name) or keyword.iskeyword(package):
        raise ConfigError(
            f"init {name if name.isprintable() else repr(name)}: a project's name is its package's name "
            "too: ASCII letters, digits, - _ and ., starting with a letter and ending with a letter or "
            "digit (e.g. runner init lab)"
        )
    taken = package_taken(package)
    if taken is not None:
        raise ConfigError(
            f"init {name}: a package named {package} is importable already ({taken}); the project's "
            f"package would hide it, and every run would import the wrong one: choose another name "
            f"(e.g. runner init my_{package})"
        )
    return package


def files_of(name: str, package: str) -> dict[str, str]:
    texts = {
        "pyproject.toml": PYPROJECT, "README.md": README, ".gitignore": GITIGNORE,
        f"src/{package}/__init__.py": INIT, f"src/{package}/models.py": MODELS,
        f"src/{package}/data.py": DATA, f"conf/model/{package}_net.yaml": MODEL_CONFIG,
        f"conf/data/{package}_data.yaml": DATA_CONFIG, "tests/test_train.py": TEST,
    }  # fmt: skip
    return {path: text.format(name=name, package=package) for path, text in texts.items()}


def create_project(folder: Path) -> list[Path]:
    """Write the project into ``folder``, which must not exist or be empty; the files written. The
    project is named after the folder (``init .``: the working folder's name). The files are written
    into a folder of their own (beside ``folder``, or inside it where it exists already, as the working
    folder does for ``init .``) and moved in place once all are whole: a write that fails (a full disk)
    leaves nothing behind, and the same command can run again."""
    name = folder.absolute().resolve().name if folder.name in ("", ".", "..") else folder.name
    package = package_name(name)
    inside = next(
        (above for above in (folder.absolute(), *folder.absolute().parents) if holds_a_run(above)), None
    )
    if inside is not None:
        raise ConfigError(
            f"init {folder}: {inside} holds a run (runner wrote a run there), and a run's folder is data, "
            "never a project: runner would not find it; make the project outside it"
        )
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        what = "a file" if not folder.is_dir() else "a folder that is not empty"
        raise ConfigError(f"init {folder}: it is {what}; give a new name (runner init NAME)")
    files = files_of(name, package)
    existed = folder.exists()
    made = [parent for parent in reversed(folder.absolute().parents) if not parent.exists()]
    staging = f".{name}.init-{secrets.token_hex(4)}"
    temporary = folder / staging if existed else folder.absolute().with_name(staging)
    relative = Path()
    try:
        for parent in made:
            parent.mkdir()
        temporary.mkdir()
        for relative_name, text in files.items():
            relative = Path(relative_name)
            (temporary / relative).parent.mkdir(parents=True, exist_ok=True)
            (temporary / relative).write_text(text)
        relative = Path()
        if existed:  # renames within one folder: they need no space and cannot half-write
            for entry in temporary.iterdir():
                entry.rename(folder / entry.name)
            temporary.rmdir()
        else:
            temporary.rename(folder)
    except OSError as error:
        shutil.rmtree(temporary, ignore_errors=True)
        for parent in reversed(made):
            with contextlib.suppress(OSError):
                parent.rmdir()
        raise ConfigError(
            f"init {folder}: cannot write {folder / relative}: {error.strerror}; nothing was left behind: "
            "free space (or make the place writable) and run it again"
        ) from None
    return [folder / relative_name for relative_name in files]
