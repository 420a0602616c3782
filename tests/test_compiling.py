"""compile's options, compile_regional, and what a compile cost against the first eager steps."""

import pytest
import torch
from conftest import TINY, read_scalars

from runner.config.errors import ConfigError
from runner.training.compiling import compile_timing

SMALL_TRANSFORMER = (
    "data=text", "model=char_transformer", "model.width=16", "model.heads=2", "model.layers=2",
    "data.batch_size=8", "trainer.max_steps=7", "trainer.log_every_n_steps=7",
    "trainer.val_every_n_epochs=null",
    "checkpoint.every_n_epochs=null",
    # SGD: Adam turns float noise in a gradient that is zero in exact arithmetic (attention's key bias)
    # into steps of the learning rate's size; SGD keeps differences as small as they are.
    "optimizer=sgd",
)  # fmt: skip


def test_compile_time_is_what_the_first_compiled_steps_took_beyond_the_steady_one():
    # 3 eager steps (the first warms up), 2 that compile, 3 steady ones.
    timing = compile_timing([0.5, 0.1, 0.1, 20.0, 5.0, 0.2, 0.2, 0.3], eager_steps=3)
    assert timing.seconds == pytest.approx(25.0 - 2 * 0.2)
    assert (timing.steady, timing.steady_steps, timing.eager, timing.eager_steps) == (0.2, 3, 0.1, [2, 3])
    assert "2.00x slower than the first eager ones" in timing.slower()
    assert "steady step 200.00 ms compiled (median of 3) against 100.00 ms eager (median of step 2-3)" in (
        timing.line()
    )
    faster = compile_timing([0.5, 0.3, 0.3, 20.0, 5.0, 0.2], eager_steps=3)
    assert faster.slower() is None
    assert compile_timing([0.5, 0.3, 0.3], eager_steps=3) is None  # the run ended before the compile
    too_short = compile_timing([0.5, 0.3, 0.3, 20.0], eager_steps=3)
    assert too_short.seconds == pytest.approx(20.0 - 0.3)
    assert "too few steps after the compile" in too_short.line()


def test_compile_regional_on_a_model_without_repeated_blocks_is_refused_before_anything_is_written(
    train_here, tmp_path
):
    with pytest.raises(ConfigError, match=r"compile_regional=true: Sequential has no repeated blocks"):
        train_here(*TINY, "compile_regional=true")
    assert list((tmp_path / "run").iterdir()) == []


@pytest.mark.slow
def test_compile_regional_and_whole_train_the_char_transformer_as_eager_does_and_report_compile_time(
    train_here, tmp_path, caplog
):
    """compile_regional=true, and compile=true as before (the whole model), after 3 eager steps."""
    eager = train_here(*SMALL_TRANSFORMER, run_dir=tmp_path / "eager")
    expected = torch.load(eager / "checkpoints" / "last.pt")["model_state_dict"]
    for setting, what in (("compile_regional=true", "each repeated block (compile_regional)"),
                          ("compile=true", "the whole model")):  # fmt: skip
        caplog.clear()
        compiled = train_here(*SMALL_TRANSFORMER, setting, run_dir=tmp_path / setting)
        weights = torch.load(compiled / "checkpoints" / "last.pt")["model_state_dict"]
        assert weights.keys() == expected.keys()  # plain keys: compiled in place
        for name, value in expected.items():
            torch.testing.assert_close(weights[name], value, rtol=1e-4, atol=1e-5, msg=name)
        losses = [[value for _, value in read_scalars(run)["val/loss"]] for run in (eager, compiled)]
        assert losses[1] == pytest.approx(losses[0], rel=1e-5)
        plan = next(message for message in caplog.messages if message.startswith("run plan"))
        assert f"torch.compile of {what} after 3 eager steps" in plan.replace("\n" + " " * 19, " ")
        (line,) = [message for message in caplog.messages if message.startswith("compile: ")]
        assert "s compiling (vitals/compile_seconds); steady step" in line
        ((step, seconds),) = read_scalars(compiled)["vitals/compile_seconds"]
        assert step == 7 and seconds > 0
