"""Parameters chosen by name in the config: ``freeze`` (glob patterns over ``named_parameters()``
names: ``requires_grad=False``, left out of the optimizer) and ``optimizer.param_groups`` (each group
takes the parameters its patterns match, first group first, with its own optimizer arguments; the
rest keep the optimizer's). A pattern that matches nothing is a one-line error naming the closest
parameter names: a typo never silently trains the wrong part. A weight tied to another (one tensor
under two names, such as an embedding and the output layer that shares it) is matched by either name:
``freeze=[head.*]`` freezes a ``head.weight`` tied to ``embed.weight``, as it is one tensor."""

import difflib
import fnmatch
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch

from runner.config.errors import ConfigError, show
from runner.config.schema import SETTINGS

NamedParameters = list[tuple[str, torch.nn.Parameter]]
REST = "rest"  # the group of the parameters no group of the config takes


def as_patterns(value: str | Sequence[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def closest_names(pattern: str, names: Sequence[str], count: int = 3) -> list[str]:
    """The parameter names, and the patterns of their modules (``backbone.0.*``), nearest to
    ``pattern`` (difflib's ratio), for the error that says it matched none; equally close ones in the
    model's order (``backbone.O.*`` suggests ``backbone.0.*`` first)."""
    candidates = dict.fromkeys(
        candidate
        for name in names
        for candidate in (
            *(".".join(name.split(".")[:end]) + ".*" for end in range(1, name.count(".") + 1)),
            name,
        )
    )
    ratio = {candidate: difflib.SequenceMatcher(None, pattern, candidate).ratio() for candidate in candidates}
    return sorted(candidates, key=lambda candidate: -ratio[candidate])[:count]


def matching(key: str, patterns: Iterable[str], names: Sequence[str]) -> Callable[[str], bool]:
    """Whether a name matches one of ``patterns`` (``fnmatch``); every pattern must match some name, or
    a :class:`ConfigError` names ``key``, the pattern and the closest names."""
    patterns = list(patterns)
    for pattern in patterns:
        if not any(fnmatch.fnmatchcase(name, pattern) for name in names):
            closest = ", ".join(closest_names(pattern, names))
            raise ConfigError(
                f"{key}: {show(pattern)} matches no parameter of the model; patterns are globs over "
                f"named_parameters() names (fnmatch, such as backbone.0.*); the closest names: {closest}"
            )
    return lambda name: any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


def every_name(model: torch.nn.Module) -> NamedParameters:
    """Each parameter under each of its names: a tied weight once per module that holds it
    (``named_parameters()`` names it only by the first)."""
    return list(model.named_parameters(remove_duplicate=False))


def freeze_parameters(model: torch.nn.Module, patterns: Sequence[str]) -> int:
    """``freeze``: every parameter matched by one of its names gets ``requires_grad=False``; returns how
    many tensors."""
    if not patterns:
        return 0
    named = every_name(model)
    frozen = matching("freeze", patterns, [name for name, _ in named])
    chosen = {id(parameter): parameter for name, parameter in named if frozen(name)}
    tensors = len({id(parameter) for _, parameter in named})
    if len(chosen) == tensors:  # else the optimizer's "empty parameter list", naming neither
        raise ConfigError(
            f"freeze=[{', '.join(patterns)}]: it freezes every parameter of the model ({tensors} tensors) "
            "and nothing would train; freeze the parts that stay fixed, such as [backbone.0.*]"
        )
    for parameter in chosen.values():
        parameter.requires_grad_(False)
    return len(chosen)


def trainable_named(model: torch.nn.Module) -> NamedParameters:
    return [(name, parameter) for name, parameter in model.named_parameters() if parameter.requires_grad]


def named_groups(
    model: torch.nn.Module, specs: Sequence[Mapping[str, Any]], split: Callable[[NamedParameters], list[dict]]
) -> list[dict[str, Any]]:
    """``optimizer.param_groups``: each group's trainable parameters (the first group whose patterns
    match takes a parameter), its other keys as the optimizer's arguments for it, then the rest under
    the optimizer's own (``rest``). ``split`` divides a group's parameters (``no_decay``: into a decay and
    a no-decay part, named ``<name>`` and ``<name>.no_decay``); an empty group is left out."""
    named = trainable_named(model)
    every = every_name(model)
    names = [name for name, _ in every]
    taken: dict[int, int] = {}  # parameter -> the group that took it
    for index, spec in enumerate(specs):
        if "params" not in spec:
            raise ConfigError(
                f"optimizer.param_groups[{index}] has no params; each group needs params: a pattern or a "
                "list of patterns over parameter names"
            )
        chosen = matching(f"optimizer.param_groups[{index}].params", as_patterns(spec["params"]), names)
        for name, parameter in every:  # a tied weight by any of its names
            if parameter.requires_grad and id(parameter) not in taken and chosen(name):
                taken[id(parameter)] = index
    groups, seen = [], {}
    for index, spec in enumerate([*specs, {"name": REST}]):
        members = [(name, p) for name, p in named if taken.get(id(p), len(specs)) == index]
        name = str(spec.get("name", f"group{index}"))
        if index < len(specs):
            check_group(index, name, spec, seen, bool(members))
        seen[name] = index
        options = {key: value for key, value in spec.items() if key not in ("params", "name")}
        for part in split(members):
            suffix = "" if part["name"] in ("decay", "all") else f".{part['name']}"
            settings = {key: value for key, value in part.items() if key != "name"}
            groups.append({**options, **settings, "name": name + suffix})
    return [group for group in groups if group["params"]]


def check_group(index: int, name: str, spec: Mapping[str, Any], seen: Mapping[str, int], takes: bool) -> None:
    """A name is a TensorBoard tag (``train/lr/<name>``): two groups of one name would log over each
    other, and so would a group named ``rest`` and runner's own for the parameters no group takes. A group
    whose patterns match only frozen parameters or ones an earlier group took would keep its settings
    unused, silently."""
    if name == REST:
        raise ConfigError(
            f"optimizer.param_groups[{index}].name={REST}: {REST} is runner's group of the parameters no "
            f"group takes (its rate is logged as train/lr/{REST}); give this group another name"
        )
    if name in seen:
        raise ConfigError(
            f"optimizer.param_groups[{index}].name={name}: group {seen[name]} is named {name} too; each "
            "group needs its own name (its rate is logged as train/lr/<name>)"
        )
    if not takes:
        patterns = ", ".join(as_patterns(spec["params"]))
        raise ConfigError(
            f"optimizer.param_groups[{index}] ({name}) takes no parameter: {patterns} "
            "match only frozen parameters or ones an earlier group took (the first matching group takes a "
            "parameter); narrow the earlier group's patterns or put this group first"
        )


def no_decay_split(
    model: torch.nn.Module, no_decay: Sequence[str] | None, is_norm_layer: Callable[[torch.nn.Module], bool]
) -> Callable[[NamedParameters], list[dict[str, Any]]]:
    """``optimizer.no_decay`` within one group: a parameter whose name contains one of ``no_decay``
    (``bias``), or with ``norm`` in it one of a normalisation layer, goes to the no-decay part."""
    in_norm_layers = set()
    if no_decay and "norm" in no_decay:
        for module in model.modules():
            if is_norm_layer(module):
                in_norm_layers.update(id(p) for p in module.parameters(recurse=False))

    def split(members: NamedParameters) -> list[dict[str, Any]]:
        if not no_decay:
            return [{"name": "all", "params": [parameter for _, parameter in members]}]

        def exempt(name: str, parameter: torch.nn.Parameter) -> bool:
            return id(parameter) in in_norm_layers or any(part in name for part in no_decay)

        return [
            {"name": "decay", "params": [p for name, p in members if not exempt(name, p)]},
            {"name": "no_decay", "params": [p for n, p in members if exempt(n, p)], "weight_decay": 0.0},
        ]

    return split


def offered_by_name(partial: Callable[..., Any], model: torch.nn.Module, params: Any) -> dict[str, Any]:
    """What an optimizer builder of one's own asks for in its signature and its config does not set:
    ``named_parameters`` (the trainable ones, with their names), ``model``, and with either of them
    ``params`` (what the optimizer would get). Empty when it asks for neither: it gets the parameters."""
    try:
        wanted = inspect.signature(partial).parameters
    except (TypeError, ValueError):
        return {}
    set_already = getattr(partial, "keywords", {})
    offered = {"named_parameters": lambda: trainable_named(model), "model": lambda: model}
    given = {name: make() for name, make in offered.items() if name in wanted and name not in set_already}
    if given and "params" in wanted and "params" not in set_already:
        given["params"] = params
    return given


def check_group_options(optimizer: torch.optim.Optimizer, specs: Sequence[Mapping[str, Any]]) -> None:
    """A group's key that is not one of the optimizer's arguments is a typo torch would keep silently
    (``lrr: 0.1`` trains at the optimizer's rate): refused, naming the key and the arguments."""
    for index, spec in enumerate(specs):
        for key, value in spec.items():
            rule = SETTINGS[f"optimizer.{key}"].rule if f"optimizer.{key}" in SETTINGS else None
            if key not in ("params", "name") and rule is not None and not rule.accepts(value):
                given = f"optimizer.param_groups[{index}].{key}"  # torch checks only the optimizer's own
                raise ConfigError(f"{given}={show(value)} is not allowed; {given} must be {rule.allowed}")
            if key not in ("params", "name") and key not in optimizer.defaults:
                arguments = ", ".join(["params", "name", *optimizer.defaults])
                raise ConfigError(
                    f"optimizer.param_groups[{index}].{key}: {type(optimizer).__name__} has no argument "
                    f"{key}; a group takes {arguments}"
                )
