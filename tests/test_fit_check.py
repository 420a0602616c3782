"""The model, the data and the loss tried together on the first batch, before a run writes anything."""

from contextlib import nullcontext

import pytest
import torch
from torch import nn

from runner.models import char_rnn, mlp
from runner.training.batches import BatchError
from runner.training.fit_check import check_fit
from runner.training.precision import resolve_precision
from runner.training.validation import evaluate

CPU = torch.device("cpu")
IMAGES = (torch.rand(8, 1, 8, 8), torch.randint(10, (8,)))


def fit(model, batch, loss=None):
    check_fit(model, batch, loss or nn.CrossEntropyLoss(), CPU, nullcontext, "labels")


def test_a_model_and_data_that_fit_pass_and_the_model_is_left_as_it_was():
    model = mlp([1, 8, 8], 10, hidden=[16], dropout=0.5)
    model.train()
    model[3].eval()  # a frozen part stays frozen
    before = {name: value.clone() for name, value in model.state_dict().items()}
    generator_state = torch.get_rng_state()
    fit(model, IMAGES)
    assert model.training and not model[3].training and model[1].training
    assert torch.equal(torch.get_rng_state(), generator_state)  # nothing drawn: the run is unchanged
    assert all(torch.equal(before[name], value) for name, value in model.state_dict().items())


@pytest.mark.parametrize(
    ("model", "batch", "loss", "expected"),
    [
        (char_rnn([1, 8, 8], 10), IMAGES, None, r"model \(CharRNN\) and the data do not fit: .*'indices'"),
        (mlp([64], 10), (torch.randint(50, (8, 64)), torch.randint(50, (8, 64))), None,
         r"do not fit: on the first batch, list|tuple"),
        (mlp([3, 32, 32], 10), IMAGES, None, r"mat1 and mat2 shapes cannot be multiplied"),
        (mlp([1, 8, 8], 3), IMAGES, None, r"class labels \d\.\.\d, but the model has 3 outputs"),
        (mlp([1, 8, 8], 10), IMAGES, nn.MSELoss(), r"loss=MSELoss failed .*size of tensor a \(10\)"),
        (mlp([10], 1), (torch.randn(8, 10), torch.randn(8, 1)), None, r"over the model's 1 output is 0"),
    ],
    ids=["char_rnn-on-images", "mlp-on-token-ids", "wrong-input-shape", "labels-out-of-range",
         "mse-on-class-labels", "cross-entropy-on-one-output"],
)  # fmt: skip
def test_a_misfit_is_one_line_saying_what_met_what(model, batch, loss, expected):
    with pytest.raises(BatchError, match=expected) as error:
        fit(model, batch, loss)
    assert "\n" not in str(error.value)


def test_labels_that_the_loss_ignores_are_not_out_of_range():
    targets = torch.randint(10, (8,))
    targets[:3] = -100
    fit(mlp([1, 8, 8], 10), (IMAGES[0], targets))


class Broken(nn.Module):
    def forward(self, inputs):
        raise ZeroDivisionError("a bug in the user's own forward")


def test_an_error_in_the_users_own_code_keeps_its_traceback():
    with pytest.raises(ZeroDivisionError, match="a bug in the user's own forward"):
        fit(Broken(), IMAGES)


class NoisyInTraining(nn.Module):
    """Overrides train() as such models do: input noise in training only (switched by train(), not read
    from self.training), and its batch norm kept frozen in training."""

    def __init__(self):
        super().__init__()
        self.norm, self.linear = nn.BatchNorm1d(4), nn.Linear(4, 3)
        self.noise, self.modes_told = 0.0, []

    def train(self, mode: bool = True):
        super().train(mode)
        self.norm.eval()  # frozen statistics, also in training
        self.noise = 0.5 if mode else 0.0
        self.modes_told.append(mode)
        return self

    def forward(self, inputs):
        return self.linear(self.norm(inputs + self.noise * torch.randn_like(inputs)))


def test_a_model_that_overrides_train_is_told_it_is_back_in_training_and_trains_as_unchecked():
    batch = (torch.randn(8, 4), torch.randint(3, (8,)))
    torch.manual_seed(0)
    checked = NoisyInTraining().train()
    unchecked = NoisyInTraining().train()
    unchecked.load_state_dict(checked.state_dict())
    fit(checked, batch)
    assert checked.modes_told[-2:] == [False, True] and checked.training and not checked.norm.training
    losses = []
    for model in (checked, unchecked):
        torch.manual_seed(1)
        losses.append(nn.functional.cross_entropy(model(batch[0]), batch[1]))
    assert torch.equal(losses[0], losses[1])  # step 1 alike: the noise is back on


def test_validation_hands_the_model_back_in_its_modes_a_part_frozen_by_hand_included():
    model = mlp([1, 8, 8], 10, hidden=[16], dropout=0.5).train()
    model[3].eval()  # frozen by hand, no train() override saying so
    told = NoisyInTraining().train()
    batches = [IMAGES]
    evaluate(model, batches, nn.CrossEntropyLoss(), CPU, resolve_precision("fp32", CPU), False, {}, "labels")
    assert model.training and not model[3].training and model[1].training
    evaluate(told, [(torch.randn(8, 4), torch.randint(3, (8,)))], nn.CrossEntropyLoss(), CPU,
             resolve_precision("fp32", CPU), False, {}, "labels")  # fmt: skip
    assert told.modes_told[-2:] == [False, True] and told.noise == 0.5 and not told.norm.training
