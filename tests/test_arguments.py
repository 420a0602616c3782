"""The command line as one parsed object, and the rewrites for a resume and for torchrun: pure
functions, tested without running anything."""

import pytest

from runner.cli.arguments import CommandLine, for_rank, resumed, value_text
from runner.config.errors import ConfigError


def test_flags_and_overrides_are_told_apart():
    command_line = CommandLine.parse(["-m", "--cfg", "job", "optimizer.lr=1e-3,1e-2", "+extra=1", "~clip"])
    assert command_line.sweep
    assert command_line.keys() == ["optimizer.lr", "extra", "clip"]  # ~clip is a deletion, checked too
    assert value_text(command_line.last("optimizer.lr")) == "1e-3,1e-2"
    assert command_line.last("seed") is None


def test_a_syntax_error_names_the_override_in_one_line():
    with pytest.raises(ConfigError) as error:
        CommandLine.parse(["clip=0.5", "model.hidden=[64"])
    assert str(error.value).startswith("model.hidden=[64: not a valid override (")
    assert "\n" not in str(error.value)


def test_a_resume_keeps_the_runs_overrides_under_the_new_ones_and_its_directory():
    command_line = CommandLine.parse(["resume=outputs/day/run", "trainer.max_epochs=4"])
    original = ["data=classification", "trainer.max_epochs=3", "hydra.searchpath=[file://conf]"]
    rewritten = resumed(command_line, "/abs/run/checkpoints/last.pt", "/abs/run", original, "STAMP")
    assert rewritten.arguments == (
        "data=classification", "hydra.searchpath=[file://conf]", "trainer.max_epochs=4",
        "resume=/abs/run/checkpoints/last.pt", "hydra.run.dir=/abs/run",
        "hydra.output_subdir=.hydra/resume-STAMP",
    )  # fmt: skip
    assert command_line.arguments == ("resume=outputs/day/run", "trainer.max_epochs=4")  # unchanged
    assert value_text(rewritten.last("resume")) == "/abs/run/checkpoints/last.pt"


def test_under_torchrun_every_rank_shares_rank_0s_directory_and_only_rank_0_records():
    command_line = CommandLine.parse(["clip=0.5"])
    assert for_rank(command_line, "/runs/x", 0).arguments == ("clip=0.5", "hydra.run.dir=/runs/x")
    other = for_rank(command_line, "/runs/x", 1)
    assert "hydra.output_subdir=null" in other.arguments
    assert "hydra.job_logging.handlers.file.filename='/runs/x/train.rank1.log'" in other.arguments
    sweep = for_rank(CommandLine.parse(["-m", "seed=0,1"]), "/sweeps/y", 1)
    assert "hydra.sweep.dir=/sweeps/y" in sweep.arguments
    assert (
        "hydra.job_logging.handlers.file.filename='${hydra.runtime.output_dir}/train.rank1.log'"
        in sweep.arguments
    )


def test_a_resume_keeps_hydras_flags_in_front_of_every_override():
    command_line = CommandLine.parse(["--cfg", "job", "resume=run"])
    rewritten = resumed(command_line, "/run/checkpoints/last.pt", "/run", ["clip=0.5"], "STAMP")
    assert rewritten.arguments[:3] == ("--cfg", "job", "clip=0.5")


def test_added_overrides_never_land_on_both_sides_of_a_flag():
    """Hydra's argument parser refuses overrides after a flag that follows other overrides."""
    rewritten = CommandLine.parse(["seed=0,1", "-m"]).plus("hydra.sweep.dir=/sweeps/y")
    assert rewritten.arguments == ("-m", "seed=0,1", "hydra.sweep.dir=/sweeps/y")
