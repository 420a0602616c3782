"""A default run imports only what it uses: the optional parts (trackers beside TensorBoard, Optuna and
the sweep tools, sharded checkpoints, the libraries runner adapts to) cost a run's start-up only when
it turns them on. Real processes: what a fresh interpreter has imported is the point."""

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

TINY = ("data=regression", "data.dataset.num_features=4", "model.hidden=[8]", "trainer.max_steps=1",
        "checkpoint=none")  # fmt: skip
# Imported by no run that does not ask for them (a module's prefix: its submodules too).
OPTIONAL = (
    "mlflow", "wandb", "optuna", "submitit", "joblib", "diffusers", "peft", "safetensors", "timm",
    "lightning", "matplotlib", "pandas", "torch.distributed.checkpoint", "runner.checkpoint.sharded",
    "runner.observe.mlflow_tracker", "runner.observe.wandb_tracker", "runner.observe.csv_tracker",
    "runner.search.loop", "runner.tools",
)  # fmt: skip


def modules_after(tmp_path, *overrides: str) -> set[str]:
    """Every module a ``python -m runner train`` process had imported when it exited."""
    tmp_path.mkdir(exist_ok=True)
    listing = tmp_path / "modules.txt"
    arguments = ["runner", "train", *TINY, *overrides, f"hydra.run.dir={tmp_path / 'run'}"]
    script = (
        "import atexit, runpy, sys\n"
        f"atexit.register(lambda: open({str(listing)!r}, 'w').write('\\n'.join(sys.modules)))\n"
        f"sys.argv = {arguments!r}\n"
        "runpy.run_module('runner', run_name='__main__', alter_sys=True)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=240)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return set(listing.read_text().split("\n"))


def optional_in(modules: set[str]) -> list[str]:
    return sorted(
        name for name in modules if any(name == part or name.startswith(f"{part}.") for part in OPTIONAL)
    )


def test_a_default_run_imports_none_of_the_optional_parts_and_one_that_asks_imports_it(tmp_path):
    default = modules_after(tmp_path / "default")
    assert optional_in(default) == []
    assert "runner.training.engine" in default  # the listing is the run's, trained to its step
    # The same look finds an optional part where the run turns it on.
    with_csv = modules_after(tmp_path / "csv", "logger=[tensorboard,csv]")
    assert optional_in(with_csv) == ["runner.observe.csv_tracker"]
