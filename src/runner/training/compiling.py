"""``torch.compile`` with its options (``compile_mode``, ``compile_dynamic``, ``compile_fullgraph``), of
the whole model or of each repeated block (``compile_regional``), and what it cost.

In one process the first :data:`EAGER_STEPS` steps run eager and the model is compiled in place after
them (``nn.Module.compile``: checkpoints keep plain keys): those steps are the yardstick the compiled
ones are measured against, on the same run, data and machine. The compile time is what the first
:data:`WARM_STEPS` compiled steps took beyond the steady compiled step (their median after those).
"""

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from runner.config.errors import ConfigError
from runner.config.schema import RunConfig

EAGER_STEPS = (
    3  # the first is warm-up (optimizer state, allocations): the yardstick is the median of the rest
)
WARM_STEPS = 2  # compiled steps that compile (forward, then backward and any recompile of the second)


@dataclass(frozen=True)
class CompileOptions:
    mode: str
    dynamic: bool | None
    fullgraph: bool
    regional: bool

    def arguments(self) -> dict[str, Any]:
        """``torch.compile``'s keyword arguments (its defaults where runner's are)."""
        mode = None if self.mode == "default" else self.mode
        return {"mode": mode, "dynamic": self.dynamic, "fullgraph": self.fullgraph}

    def described(self) -> str:
        what = "each repeated block (compile_regional)" if self.regional else "the whole model"
        given = [f"mode={self.mode}"] if self.mode != "default" else []
        given += [f"dynamic={self.dynamic}"] if self.dynamic is not None else []
        given += ["fullgraph=True"] if self.fullgraph else []
        return f"torch.compile of {what}" + (f" ({', '.join(given)})" if given else "")


def compile_options(config: RunConfig) -> CompileOptions | None:
    """None: no compile (``compile=false`` and ``compile_regional=false``)."""
    if not (config.compile or config.compile_regional):
        return None
    return CompileOptions(
        config.compile_mode, config.compile_dynamic, config.compile_fullgraph, config.compile_regional
    )


def blocks_to_compile(model: nn.Module) -> list[nn.Module]:
    """The model's repeated blocks, as ``strategy=fsdp`` finds them; an error where it has none."""
    from runner.training.sharding import repeated_blocks  # FSDP2's modules: imported only when asked

    blocks = repeated_blocks(model)
    if not blocks:
        raise ConfigError(
            f"compile_regional=true: {type(model).__name__} has no repeated blocks (the layers of a "
            "ModuleList of one class) to compile one by one; use compile=true to compile the whole model"
        )
    return blocks


def compile_in_place(model: nn.Module, options: CompileOptions) -> None:
    """``nn.Module.compile``: the module (or each block) calls its compiled forward from now on, and
    keeps its own class, parameters and state dict keys."""
    for module in blocks_to_compile(model) if options.regional else [model]:
        module.compile(**options.arguments())


@dataclass
class DelayedCompile:
    """Compiles ``model`` in place at the step boundary after this process's first ``eager`` steps
    (``StepTimes.at_step``); times what the compile cost from the steps' compute times."""

    model: nn.Module
    options: CompileOptions
    eager: int = EAGER_STEPS
    boundaries: int = 0  # seen by this process
    compiled_after: int | None = None  # steps of this process run eager before the compile

    def __post_init__(self) -> None:
        if self.options.regional:
            blocks_to_compile(self.model)  # a model without blocks is refused before the run starts

    def __call__(self, steps_done: int) -> None:
        if self.compiled_after is None and self.boundaries == self.eager:
            compile_in_place(self.model, self.options)
            self.compiled_after = self.boundaries
        self.boundaries += 1


@dataclass
class CompileTiming:
    seconds: float  # compiling, beyond the steady step
    warm_steps: int
    steady: float | None  # median compiled step, seconds
    steady_steps: int
    eager: float | None  # median eager step (the first excluded), seconds
    eager_steps: list[int] = field(default_factory=list)  # which steps of this process, from 1

    def line(self) -> str:
        text = f"compile: {self.seconds:.1f} s compiling (vitals/compile_seconds)"
        if self.steady is None:
            return text + "; too few steps after the compile to time the steady step"
        text += f"; steady step {1000 * self.steady:.2f} ms compiled (median of {self.steady_steps})"
        if self.eager is not None:
            steps = "-".join(str(step) for step in self.eager_steps[:: max(len(self.eager_steps) - 1, 1)])
            text += f" against {1000 * self.eager:.2f} ms eager (median of step {steps})"
        return text

    def slower(self) -> str | None:
        """The warning when compiled steps are slower than the eager ones."""
        if self.steady is None or self.eager is None or self.steady <= self.eager:
            return None
        return (
            f"compiled steps are {self.steady / self.eager:.2f}x slower than the first eager ones: compile "
            "does not pay for itself on this run (try compile=false, or compile_mode=max-autotune on a GPU)"
        )


def compile_timing(step_compute: Sequence[float], eager_steps: int) -> CompileTiming | None:
    """From each step's compute seconds, the first ``eager_steps`` eager; None: no compiled step."""
    eager, compiled = list(step_compute[:eager_steps]), list(step_compute[eager_steps:])
    if not compiled:
        return None
    warm, steady = compiled[:WARM_STEPS], compiled[WARM_STEPS:]
    eager_timed = eager[1:] or eager
    eager_median = statistics.median(eager_timed) if eager_timed else None
    steady_median = statistics.median(steady) if steady else None
    reference = steady_median if steady_median is not None else eager_median or 0.0
    seconds = max(sum(warm) - len(warm) * reference, 0.0)
    first = eager_steps - len(eager_timed) + 1
    return CompileTiming(
        seconds, len(warm), steady_median, len(steady), eager_median,
        list(range(first, first + len(eager_timed))),
    )  # fmt: skip


def compiled_now(model: nn.Module, options: CompileOptions | None) -> nn.Module:
    """With several processes (DDP's or FSDP's wrapper): compiled at once, no eager yardstick; what
    the step calls (the compiled wrapper, or the model with its blocks compiled in place)."""
    if options is None:
        return model
    if options.regional:
        compile_in_place(model, options)
        return model
    import torch

    return torch.compile(model, **options.arguments())
