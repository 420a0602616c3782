"""The run plan answers what a person checks first, in rows that fit a terminal."""

import re

import torch
from conftest import TINY

from runner.experiment.runplan import WIDTH


def plan_of(caplog) -> dict[str, str]:
    """The plan's rows by name, continuation lines joined."""
    text = caplog.text.split("run plan\n", 1)[1]
    rows: dict[str, str] = {}
    name = ""
    for line in text.splitlines():
        if not line.startswith("  "):
            break
        if line[2] != " ":
            name, value = line[2:18].strip(), line[19:]
            rows[name] = value
        else:
            rows[name] += "\n" + line.strip()
    return rows


def test_the_plan_names_model_data_optimizer_schedule_and_loss(train_here, caplog):
    run_dir = train_here(*TINY, "optimizer=adamw", "optimizer.lr=0.003", "optimizer.weight_decay=0.05",
                         "model.hidden=[32]", "scheduler=cosine")  # fmt: skip
    rows = plan_of(caplog)
    weights = torch.load(run_dir / "checkpoints" / "last.pt")["model_state_dict"]
    count = sum(tensor.numel() for tensor in weights.values())
    assert rows["model"] == f"Sequential (runner.models.mlp): {count:,} parameters, all trainable"
    assert rows["data"] == "64 train, 32 validation samples; 4 optimizer steps per epoch"
    assert rows["optimizer"] == "AdamW, lr 0.003, weight decay 0.05"
    assert rows["loss"] == "CrossEntropyLoss"
    assert rows["schedule"].startswith("cosine")
    assert "parameter groups" not in rows  # one group: the optimizer row says it all
    if not torch.cuda.is_available():
        assert "speed" not in rows  # nothing applies on a CPU by default: no row of "off" notes
    assert rows["checkpoints"] == "every epoch (newest 2 kept), best.pt on val/loss (min), last.pt"


def test_rows_fit_in_100_characters_wrapping_at_spaces(train_here, caplog):
    """A long value (a resume's overrides, the parameter groups) continues under its column; paths
    and the TensorBoard command stay whole on their line."""
    run_dir = train_here(
        "model=cnn", "channels_last=true", "+optimizer.no_decay=[bias,norm]", "trainer.max_steps=2"
    )
    text = caplog.text.split("run plan\n", 1)[1]
    lines = [line for line in text.splitlines() if line.startswith("  ")]
    for line in lines:
        assert len(line) <= WIDTH or line.split()[0] in ("run", "watch", "resumed"), line
    assert f"  watch            tensorboard --logdir {run_dir}\n" in text
    assert re.search(r"\n {19}\S", text)  # the groups: one per line, under the value column


def test_a_trainable_count_is_shown_when_parts_are_frozen():
    from runner.experiment import runplan

    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    model[0].requires_grad_(False)
    assert runplan.model_plan(model, None) == "Sequential: 23 parameters, 8 trainable"
    assert runplan.memory_plan(model, 2) == "parameters 92 B per process (a whole copy on each process)"


def test_the_effective_batch_counts_processes_in_words(train_here, caplog):
    """ "x 2 processes" under torchrun (tests/test_distributed.py), "x 1 process" here."""
    train_here(*TINY, "accumulate=2")
    assert plan_of(caplog)["effective batch"] == "32 = 16 (data.batch_size) x 2 (accumulate) x 1 process"


def test_the_optimizer_row_gives_the_optimizers_rate_when_groups_have_their_own(train_here, caplog):
    """With ``optimizer.param_groups`` the first group's rate is not the optimizer's: the row says the
    configured ``optimizer.lr`` and points at the groups' rows."""
    train_here(*TINY, "optimizer.lr=0.003", "+optimizer.param_groups=[{name: first, params: '1.*', lr: 0.5}]")
    rows = plan_of(caplog)
    assert re.match(r"\w+, lr 0.003 \(each group's below\)", rows["optimizer"]), rows["optimizer"]
    assert "first: 2 tensors" in rows["parameter groups"] and "lr 0.5" in rows["parameter groups"]
