"""A model's carried state (carried.py): the protocol a model opts in with, checked before a run starts."""

import pytest
from torch import nn

from runner.config.errors import UserError
from runner.training.carried import NoCarriedState, carried_state_of


class HalfAState:
    def state_dict(self):
        return {}


def test_a_model_without_a_carried_state_carries_nothing():
    assert isinstance(carried_state_of(nn.Linear(2, 2)), NoCarriedState)


def test_a_carried_state_without_part_of_the_protocol_is_named_in_one_line():
    model = nn.Linear(2, 2)
    model.carried_state = HalfAState()
    with pytest.raises(
        UserError, match=r"Linear.carried_state is a HalfAState without load_state_dict, reset"
    ) as error:
        carried_state_of(model)
    assert "\n" not in str(error.value)


class Carried:
    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass

    def reset(self):
        pass


def test_a_carried_state_on_several_processes_is_refused_before_the_run_starts():
    model = nn.Linear(2, 2)
    model.carried_state = Carried()
    assert carried_state_of(model) is model.carried_state
    with pytest.raises(UserError, match=r"Linear carries a state .* has 2 processes: .* one process"):
        carried_state_of(model, processes=2)
