"""runner.train in this process: the overrides it takes (any iterable of strings, read once) and those
it refuses in one line. The whole notebook round trip is tests/test_project.py's."""

import pytest
import torch
from conftest import TINY

import runner
from runner.api import checked_overrides


def test_train_takes_a_generator_of_overrides_and_trains_with_every_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "run"
    result = runner.train(override for override in (*TINY, "trainer.max_steps=3", f"hydra.run.dir={run_dir}"))
    assert result.run_dir == run_dir and result.status == "ok"
    assert torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)["global_step"] == 3


@pytest.mark.parametrize(
    ("overrides", "shown"),
    [
        ("optimizer.lr=0.01", "'optimizer.lr=0.01'"),
        ({"optimizer.lr": 0.01}, "{'optimizer.lr': 0.01}"),
        (iter(["seed=1", 2]), "['seed=1', 2]"),
        (3, "3"),
    ],
)
def test_train_refuses_overrides_that_are_not_strings_in_one_line(overrides, shown):
    with pytest.raises(runner.UserError) as refused:
        checked_overrides(overrides)
    assert str(refused.value) == (
        "runner.train takes the overrides as strings (a list, a tuple or any iterable of them), e.g. "
        f"['optimizer.lr=0.01']; got {shown}"
    )
