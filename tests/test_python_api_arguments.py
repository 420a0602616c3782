"""``runner.train`` and ``runner.load_model`` with the arguments a script may hand them: a path of another
type (an int, bytes, an empty string), ``allow_targets`` as one string, calls from several threads. Each
either works as the user meant or is one ``runner.UserError`` naming the argument; nothing is written."""

import threading

import pytest
import torch
from conftest import TINY

import runner


@pytest.fixture
def trained(train_here) -> dict:
    """A run of a test plug-in's model (tests/plugins/tied.py): code a file names, allowed by name."""
    run_dir = train_here(*TINY, "model._target_=tied.TiedNet", "~model.hidden", "~model.dropout")
    return {
        "run_dir": run_dir,
        "weights": torch.load(run_dir / "checkpoints" / "best.pt")["model_state_dict"],
    }


def same_weights(model: torch.nn.Module, weights: dict) -> bool:
    state = model.state_dict()
    return state.keys() == weights.keys() and all(torch.equal(state[name], weights[name]) for name in weights)


def refused(call) -> str:
    with pytest.raises(runner.UserError) as error:
        call()
    assert "\n" not in str(error.value)
    return str(error.value)


def test_a_path_of_another_type_is_refused_by_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    class NoPath:
        def __fspath__(self):
            return 5

    for given in (5, None, "", "run\0", NoPath(), ["run"]):
        message = refused(lambda given=given: runner.load_model(given))
        assert message.startswith("runner.load_model(path=") and "): path must be a path (a str, " in message
        assert message.endswith(f"got {type(given).__name__}")
    assert refused(lambda: runner.train(TINY, project=3)) == (
        "runner.train(project=3): project must be a path (a str, bytes or pathlib.Path; not empty, no NUL "
        "character); got int"
    )
    assert refused(lambda: runner.load_model("run", device=0)).startswith(
        "runner.load_model(device=0): device"
    )
    assert list(tmp_path.iterdir()) == []


def test_a_bytes_path_is_a_path_as_in_pythons_own_file_functions(trained):
    model = runner.load_model(bytes(trained["run_dir"]), allow_targets=["tied.TiedNet"])
    assert same_weights(model, trained["weights"])


def test_allow_targets_as_one_string_is_one_target_as_on_the_command_line(trained):
    run_dir = trained["run_dir"]
    message = refused(lambda: runner.load_model(run_dir))
    assert message.endswith('If you trust it, allow them with load_model(..., allow_targets="tied.TiedNet")')
    assert same_weights(runner.load_model(run_dir, allow_targets="tied.TiedNet"), trained["weights"])
    assert same_weights(
        runner.load_model(run_dir, allow_targets="other.Net,tied.TiedNet"), trained["weights"]
    )
    for given in (5, [5], b"tied.TiedNet", {"tied.TiedNet": True}):
        assert refused(lambda given=given: runner.load_model(run_dir, allow_targets=given)).startswith(
            f"runner.load_model(allow_targets={given!r}): allow_targets takes _target_ names"
        )


def test_calls_from_several_threads_run_one_at_a_time_and_each_works(trained, tmp_path):
    results: dict[str, object] = {}

    def call(name: str, function) -> None:
        try:
            results[name] = function()
        except BaseException as error:  # what the thread met, for the assertion below
            results[name] = error

    calls = {
        f"train {index}": lambda index=index: runner.train([*TINY, f"hydra.run.dir={tmp_path / str(index)}"])
        for index in range(2)
    }
    calls |= {
        f"load {index}": lambda: runner.load_model(trained["run_dir"], allow_targets="tied.TiedNet")
        for index in range(3)
    }
    threads = [threading.Thread(target=call, args=item) for item in calls.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(results[f"train {index}"].status == "ok" for index in range(2)), results
    assert all(same_weights(results[f"load {index}"], trained["weights"]) for index in range(3)), results
