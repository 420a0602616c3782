"""A part the model's builder left in ``eval()`` (a frozen teacher) stays in eval while the rest trains,
as a hand loop keeps it, and the run plan says so in one line."""

from pathlib import Path

import pytest
import torch
from conftest import read_scalars
from torch import nn

from runner.data import load_digits
from runner.training.modes import set_apart, start_training
from runner.training.seeding import seed_everything

EPOCHS, BATCH_SIZE, SEED = 2, 64, 0
DISTILL = (
    "model._target_=distill.distiller", "~model.input_shape", "~model.num_outputs", "~model.hidden",
    "~model.dropout", "loss=from_model", f"data.batch_size={BATCH_SIZE}", f"trainer.max_epochs={EPOCHS}",
    "trainer.log_every_n_steps=1", f"seed={SEED}",
)  # fmt: skip


def hand_loop():
    """Distillation as written by hand, with no override: the teacher put back in eval() after
    ``model.train()``, Adam, clip 1.0, the data in runner's order (randperm(seed + epoch))."""
    from distill import distiller

    seed_everything(SEED)
    model = distiller()
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(trainable, lr=1e-3)
    train_set, _ = load_digits()
    losses = []
    for epoch in range(EPOCHS):
        model.train()
        model.teacher.eval()
        order = torch.randperm(len(train_set), generator=torch.Generator().manual_seed(SEED + epoch)).tolist()
        for start in range(0, len(order), BATCH_SIZE):
            samples = [train_set[index] for index in order[start : start + BATCH_SIZE]]
            images, labels = torch.stack([s[0] for s in samples]), torch.stack([s[1] for s in samples])
            loss = model(images, labels)["loss"]
            loss.backward()
            torch.nn.utils.clip_grad_norm_(trainable, 1.0)
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item())
    return losses, model.state_dict()


def test_a_teacher_frozen_at_build_trains_as_the_hand_loop_bit_for_bit(train_here, caplog):
    run_dir = train_here(*DISTILL)
    losses, weights = hand_loop()
    assert [value for _, value in read_scalars(run_dir)["train/loss"]] == losses
    trained = torch.load(run_dir / "checkpoints" / "last.pt")["model_state_dict"]
    assert trained.keys() == weights.keys()
    for name, value in weights.items():
        assert torch.equal(trained[name], value), name
    # The teacher's batch norm statistics were never updated: they are saved as built.
    assert int(trained["teacher.2.num_batches_tracked"]) == 0
    assert torch.equal(trained["teacher.2.running_mean"], torch.zeros(32))
    plan_row = "  modes            teacher in eval() as built, kept so in training (dropout off, batch norm"
    assert plan_row in caplog.text


class Frozen(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(2, 2), nn.Dropout())
        self.frozen = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.Dropout(), nn.BatchNorm1d(2)))


def test_start_training_keeps_each_part_set_apart_in_the_modes_it_was_built_with():
    model = Frozen()
    model.frozen.eval()
    model.frozen[1].train()  # a part of the frozen part trains again, by hand: kept as well
    parts = set_apart(model)
    assert list(parts) == ["frozen"]
    model.eval()  # validation, say
    start_training(model, parts)
    assert model.training and model.body[1].training
    assert not model.frozen.training and not model.frozen[0].training
    assert model.frozen[1].training and model.frozen[1][1].training


@pytest.mark.parametrize("whole", [True, False])
def test_a_model_built_all_in_train_or_all_in_eval_trains_as_model_train_has_it(whole):
    """transformers' from_pretrained returns a model in eval() as a whole: it trains, dropout on."""
    model = Frozen()
    if whole:
        model.eval()
    parts = set_apart(model)
    assert parts == {}
    start_training(model, parts)
    assert all(module.training for module in model.modules())


def test_lr_find_steps_with_the_teacher_in_eval_as_the_run_does(monkeypatch):
    """lr_find (and doctor's overfit check) train a copy of the model as the run starts it."""
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "plugins"))
    from distill import distiller

    from runner.tools.lr_find import find_lr
    from runner.training.batches import ModelLoss
    from runner.training.precision import resolve_precision

    model = distiller()
    seen = []
    model.teacher.register_forward_pre_hook(lambda module, _: seen.append(module.training))
    train_set, _ = load_digits()
    loader = torch.utils.data.DataLoader(train_set, batch_size=32)
    cpu = torch.device("cpu")
    find_lr(model, lambda m: torch.optim.SGD(m.parameters(), lr=0.1), ModelLoss(), loader, cpu,
            resolve_precision("fp32", cpu), None, "labels", num_steps=5)  # fmt: skip
    assert seen and not any(seen)
