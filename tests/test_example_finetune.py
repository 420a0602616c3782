"""The worked example in examples/finetune/: frozen first block, backbone and head at two rates, no decay
on biases and norms, all from the config, trains bit for bit as its hand-written loop; a pattern that
matches nothing is refused naming the closest names; doctor runs on it."""

import pytest
import torch
from conftest import REPO, composed, read_scalars
from hydra.utils import instantiate

from runner.config.errors import ConfigError
from runner.data import load_digits
from runner.experiment.setup import build_optimizer, prepare
from runner.tools.doctor import PASS, Setup, run_checks
from runner.training.seeding import seed_everything

EXAMPLE = REPO / "examples" / "finetune"
EXPERIMENT = (f"hydra.searchpath=[file://{EXAMPLE / 'conf'}]", "+experiment=finetune")
EPOCHS, BATCH_SIZE = 2, 64


@pytest.fixture
def example(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE))


def hand_loop(seed: int = 0):
    """The fine-tune as one writes it by hand: freeze, four groups, AdamW, clip, the data in runner's
    order (randperm(seed + epoch))."""
    from finetune import classifier

    seed_everything(seed)
    model = classifier([1, 8, 8], 10, width=64, blocks=3)
    initial_block = {name: value.clone() for name, value in model.backbone[0].state_dict().items()}
    for parameter in model.backbone[0].parameters():
        parameter.requires_grad_(False)

    def split(module):
        named = [(name, p) for name, p in module.named_parameters() if p.requires_grad]
        exempt = [p for name, p in named if name.endswith("bias") or ".1." in name]  # biases, LayerNorms
        return [p for _, p in named if all(p is not q for q in exempt)], exempt

    backbone_decay, backbone_exempt = split(model.backbone)
    head_decay, head_exempt = split(model.head)
    optimizer = torch.optim.AdamW(
        [
            {"params": backbone_decay, "lr": 1e-3},
            {"params": backbone_exempt, "lr": 1e-3, "weight_decay": 0.0},
            {"params": head_decay},
            {"params": head_exempt, "weight_decay": 0.0},
        ],
        lr=1e-2, weight_decay=0.05,
    )  # fmt: skip
    trainable = [p for p in model.parameters() if p.requires_grad]
    loss_fn = torch.nn.CrossEntropyLoss()
    train_set, _ = load_digits()
    losses = []
    model.train()
    for epoch in range(EPOCHS):
        order = torch.randperm(len(train_set), generator=torch.Generator().manual_seed(seed + epoch)).tolist()
        for start in range(0, len(order), BATCH_SIZE):
            samples = [train_set[index] for index in order[start : start + BATCH_SIZE]]
            images, labels = torch.stack([s[0] for s in samples]), torch.stack([s[1] for s in samples])
            loss = loss_fn(model(images), labels)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(trainable, 1.0)
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item())
    return losses, model.state_dict(), initial_block


def test_the_finetune_trains_as_its_hand_loop(train_here, example, caplog):
    run_dir = train_here(*EXPERIMENT, f"trainer.max_epochs={EPOCHS}", "trainer.log_every_n_steps=1")
    losses, weights, initial_block = hand_loop()
    scalars = read_scalars(run_dir)
    assert [value for _, value in scalars["train/loss"]] == losses
    trained = torch.load(run_dir / "checkpoints" / "last.pt")["model_state_dict"]
    for name, value in weights.items():
        assert torch.equal(trained[name], value), name
    for name, value in initial_block.items():  # the frozen block did not move
        assert torch.equal(trained[f"backbone.0.{name}"], value), name
    assert [value for _, value in scalars["train/lr/backbone"]] == pytest.approx([1e-3] * len(losses))
    assert [value for _, value in scalars["train/lr/head.no_decay"]] == pytest.approx([1e-2] * len(losses))
    plan = caplog.text
    assert "  parameter groups backbone: 2 tensors, 8,192 parameters, lr 0.001, weight_decay 0.05\n" in plan
    assert "head.no_decay: 1 tensor, 10 parameters, lr 0.01, weight_decay 0\n" in plan
    assert "frozen: 4 tensors, 4,288 parameters\n" in plan


@pytest.mark.parametrize(
    ("override", "key", "closest"),
    [
        ("freeze=[backbone.O.*]", "freeze", "backbone.0.*"),
        ("optimizer.param_groups=[{params: haed.*}]", "optimizer.param_groups[0].params", "head.*"),
    ],
)
def test_a_pattern_that_matches_nothing_is_refused_naming_the_closest_names(
    train_here, example, tmp_path, override, key, closest
):
    run_dir = tmp_path / "refused"
    with pytest.raises(ConfigError) as refused:
        train_here(*EXPERIMENT, override, run_dir=run_dir)
    message = str(refused.value)
    assert message.startswith(f"{key}: ") and "matches no parameter" in message, message
    assert closest in message.split("closest names: ")[1], message
    assert "\n" not in message
    assert not list(run_dir.iterdir())  # nothing written


def test_a_group_argument_the_optimizer_does_not_take_is_refused(train_here, example, tmp_path):
    with pytest.raises(ConfigError) as refused:
        train_here(*EXPERIMENT, "optimizer.param_groups=[{params: head.*, lrr: 0.1}]", run_dir=tmp_path / "r")
    assert str(refused.value).startswith("optimizer.param_groups[0].lrr: AdamW has no argument lrr; a group "
                                         "takes params, name, lr, "), refused.value  # fmt: skip


def test_doctor_runs_every_check_on_a_frozen_grouped_model(example):
    config = composed(*EXPERIMENT)
    prepared = prepare(config, instantiate, config.seed)
    assert not prepared.parts.model.backbone[0][0].weight.requires_grad
    results = run_checks(
        Setup.of(config, prepared, lambda model: build_optimizer(instantiate, config, model))
    )
    assert [result.status for result in results] == [PASS] * 8, [(r.number, r.found) for r in results]
    assert "10 of 10 trainable tensors changed" in results[5].found, results[5].found
