"""Parameters chosen by name in the config: freeze, optimizer.param_groups (first match wins, the rest
keep the optimizer's settings, no_decay splits each group), a builder of one's own given the names."""

import pytest
import torch
from conftest import PLUGINS, composed
from hydra.utils import instantiate
from torch import nn

from runner.config.errors import ConfigError
from runner.experiment.param_groups import closest_names, freeze_parameters, named_groups, no_decay_split
from runner.experiment.setup import build_model_and_data, build_optimizer, is_norm_layer

CPU = torch.device("cpu")


def net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.Linear(8, 8), nn.Linear(8, 2))


def names_of(model: nn.Module, group: dict) -> list[str]:
    ids = {id(p) for p in group["params"]}
    return [name for name, p in model.named_parameters() if id(p) in ids]


def test_the_first_matching_group_takes_a_parameter_and_the_rest_keep_the_optimizers_settings():
    model = net()
    specs = [
        {"params": ["2.*", "3.weight"], "lr": 0.5, "name": "late"},
        {"params": "3.*", "weight_decay": 0.3},
    ]
    groups = named_groups(model, specs, no_decay_split(model, None, is_norm_layer))
    assert [group["name"] for group in groups] == ["late", "group1", "rest"]
    assert names_of(model, groups[0]) == ["2.weight", "2.bias", "3.weight"] and groups[0]["lr"] == 0.5
    assert names_of(model, groups[1]) == ["3.bias"] and groups[1]["weight_decay"] == 0.3
    assert names_of(model, groups[2]) == ["0.weight", "0.bias", "1.weight", "1.bias"]
    assert set(groups[2]) == {"params", "name"}  # the optimizer's own settings


def test_no_decay_splits_each_group_and_frozen_parameters_are_left_out():
    model = net()
    assert freeze_parameters(model, ["0.*"]) == 2
    groups = named_groups(model, [{"params": "3.*", "lr": 0.5, "name": "head"}],
                          no_decay_split(model, ["bias", "norm"], is_norm_layer))  # fmt: skip
    assert {group["name"]: names_of(model, group) for group in groups} == {
        "head": ["3.weight"],
        "head.no_decay": ["3.bias"],
        "rest": ["2.weight"],
        "rest.no_decay": ["1.weight", "1.bias", "2.bias"],
    }
    assert all(group["weight_decay"] == 0.0 for group in groups if group["name"].endswith(".no_decay"))
    assert groups[1]["lr"] == 0.5


def test_closest_names_suggest_module_patterns_and_names():
    names = [name for name, _ in net().named_parameters()]
    assert closest_names("3.wieght", names)[0] == "3.weight"
    assert "2.*" in closest_names("2.x*", names)


def test_closest_names_put_the_first_module_first_among_equally_close_ones():
    """``backbone.O.*`` (a letter O) is as close to every block's pattern: the model's order breaks the
    tie, so the block meant (``backbone.0.*``) comes first, not last."""
    names = [f"backbone.{block}.{kind}" for block in range(3) for kind in ("weight", "bias")]
    assert closest_names("backbone.O.*", names) == ["backbone.0.*", "backbone.1.*", "backbone.2.*"]


def optimizer_for(*overrides: str) -> tuple[nn.Module, torch.optim.Optimizer]:
    config = composed("optimizer=sgd", "trainer.max_steps=1", *overrides)
    model = build_model_and_data(config, instantiate, CPU).model
    return model, build_optimizer(instantiate, config, model)


@pytest.fixture
def plugins(monkeypatch):
    monkeypatch.syspath_prepend(str(PLUGINS))


def test_a_builder_that_asks_for_named_parameters_is_given_them(plugins):
    model, optimizer = optimizer_for(
        "optimizer._target_=named_optimizer.head_faster", "+optimizer.head_lr=0.5"
    )
    head = optimizer.param_groups[1]
    assert head["lr"] == 0.5 and [id(p) for p in head["params"]] == [id(p) for p in model[3].parameters()]
    assert optimizer.param_groups[0]["lr"] == 0.01


def test_a_builder_that_asks_for_the_model_is_given_it_and_frozen_parameters_stay_out(plugins):
    model, optimizer = optimizer_for("optimizer._target_=named_optimizer.over_the_model")
    assert [id(p) for p in optimizer.param_groups[0]["params"]] == [id(p) for p in model[3].parameters()]
    model, optimizer = optimizer_for("freeze=[1.*]")
    assert not model[1].weight.requires_grad
    assert [id(p) for p in optimizer.param_groups[0]["params"]] == [id(p) for p in model[3].parameters()]


@pytest.mark.parametrize(
    ("group", "says"),
    [("{params: '1.*', lr: -1}", r"param_groups\[0\].lr=-1 is not allowed; .* must be a .*number >= 0"),
     ("{params: '1.*', weight_decay: -0.1}", r"param_groups\[0\].weight_decay=-0.1 is not allowed")],
)  # fmt: skip
def test_a_groups_own_argument_is_held_to_the_optimizers_rule(group, says):
    """torch checks lr only for the optimizer's defaults: a group's lr of -1 trained uphill."""
    with pytest.raises(ConfigError, match=says):
        optimizer_for(f"+optimizer.param_groups=[{group}]")


def test_two_groups_of_one_name_and_a_group_that_takes_nothing_are_refused():
    """A name is a TensorBoard tag (train/lr/<name>): two groups would log over each other. A group
    whose patterns match only parameters an earlier group took would silently keep its settings unused."""
    with pytest.raises(ConfigError, match=r"optimizer.param_groups\[1\].name=a: group 0 is named a too"):
        optimizer_for("+optimizer.param_groups=[{name: a, params: '1.*'}, {name: a, params: '3.*'}]")
    with pytest.raises(ConfigError, match=r"optimizer.param_groups\[1\] \(b\) takes no parameter: .*1\.\*"):
        optimizer_for("+optimizer.param_groups=[{name: a, params: '*'}, {name: b, params: '1.*', lr: 9}]")


def test_freezing_every_parameter_is_refused_by_the_freeze_key():
    """Not the optimizer's 'empty parameter list', which named neither freeze nor its patterns."""
    with pytest.raises(
        ConfigError, match=r"^freeze=\[\*\]: it freezes every parameter of the model \(8 tensors\)"
    ):
        freeze_parameters(net(), ["*"])


class Tied(nn.Module):
    """``b.weight`` is ``a.weight`` (as an output layer shares its embedding): ``named_parameters()``
    names that tensor ``a.weight`` only."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)
        self.b.weight = self.a.weight


def test_a_tied_weight_is_frozen_and_grouped_by_either_of_its_names():
    model = Tied()
    assert freeze_parameters(model, ["b.*"]) == 2  # the tied weight and b.bias
    assert (
        not model.b.weight.requires_grad and not model.a.weight.requires_grad and model.a.bias.requires_grad
    )
    model = Tied()
    assert freeze_parameters(model, ["b.weight"]) == 1 and not model.a.weight.requires_grad
    model = Tied()
    groups = named_groups(model, [{"params": "b.*", "lr": 0.5, "name": "head"}],
                          no_decay_split(model, None, is_norm_layer))  # fmt: skip
    assert {group["name"]: names_of(model, group) for group in groups} == {
        "head": ["a.weight", "b.bias"],
        "rest": ["a.bias"],
    }


def test_a_group_named_rest_is_refused_as_runners_own_groups_name():
    """runner's group of the parameters no group takes is rest (train/lr/rest): one named so by the
    config would log its rate over it."""
    with pytest.raises(ConfigError) as refused:
        optimizer_for("+optimizer.param_groups=[{name: rest, params: '1.*', lr: 0.5}]")
    assert str(refused.value) == (
        "optimizer.param_groups[0].name=rest: rest is runner's group of the parameters no group takes (its "
        "rate is logged as train/lr/rest); give this group another name"
    )
