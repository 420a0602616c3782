"""The walls between runner's parts, read from the package's own imports: a change that crosses one
fails here, not in a review months later."""

import ast
import warnings
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "runner"
# The Python API (runner.api: runner.train, runner.load_model) is the command line's twin, above all else;
# the package imports it only when one of its names is first used.
CLI = {"runner.cli", "runner.__main__", "runner.api"}
# Lower layers never import higher ones; a module may import its own layer (without cycles). The
# engine (training) calls its policies (checkpointing, logging and the console), so they sit below it
# and know nothing of it: TrainState, what a checkpoint saves of the loop, lives in checkpoint; the run
# plan, which describes what the experiment built, lives in experiment.
LAYERS = [
    {"runner.config"},
    {"runner.data", "runner.models"},
    {"runner.checkpoint"},
    {"runner.observe"},
    {"runner.training"},
    {"runner.search"},
    {"runner.experiment"},
    {"runner.tools"},
    CLI,
]
# What one optimizer step and one validation run: math on tensors. Neither they nor anything they
# import prints, logs or saves; the engine around them does, at its fixed points.
MATH = ("runner.training.step", "runner.training.validation")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """Every module an import statement names (also inside functions: a late import is still one)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


MODULES = {module_name(path): imports_of(path) for path in PACKAGE.rglob("*.py")}


# The package's face: ``runner.train`` and ``runner.load_model`` are imported from runner.api by the
# package's ``__getattr__`` when first used, so ``import runner`` (for its version) loads none of it.
LAZY = {"runner": {"runner.api"}}


def runner_imports(module: str) -> set[str]:
    """The runner modules ``module`` imports (``from runner.x import name`` counts as runner.x)."""
    return {name for name in MODULES[module] if name in MODULES} - LAZY.get(module, set())


def within(module: str, *prefixes: str) -> bool:
    return any(module == prefix or module.startswith(prefix + ".") for prefix in prefixes)


def layer_of(module: str) -> int:
    return next(index for index, layer in enumerate(LAYERS) if within(module, *layer) or module == "runner")


def test_every_module_has_a_layer():
    for module in MODULES:
        layer_of(module)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_nothing_imports_upward(module):
    upward = [name for name in runner_imports(module) if layer_of(name) > layer_of(module)]
    assert not upward, f"{module} imports {upward} from a higher layer"


def test_the_engine_and_the_step_know_neither_hydra_nor_the_command_line():
    for module in ("runner.training.engine", "runner.training.step"):
        crossing = [name for name in MODULES[module] if within(name, "hydra", "omegaconf", "runner.cli")]
        assert not crossing, f"{module} imports {crossing}"


def reached_from(module: str) -> set[str]:
    """Every runner module that importing ``module`` imports, directly or through others."""
    reached, todo = set(), [module]
    while todo:
        for name in runner_imports(todo.pop()) - reached:
            reached.add(name)
            todo.append(name)
    return reached


# The lifecycle of one run or sweep job (refusals and their undo, continuing a sweep, the start and end
# lines, the result, a sweep's stop): the command line reads Hydra's facts about the job once and hands
# them over, so the quick lane drives it in-process (tests/test_job.py).
JOB_LIFECYCLE = (
    "runner.experiment.job",
    "runner.experiment.job_facts",
    "runner.experiment.sweep_job",
    "runner.experiment.sweep_stop",
    "runner.experiment.undo",
    "runner.experiment.run_files",
)


@pytest.mark.parametrize("module", JOB_LIFECYCLE)
def test_the_job_lifecycle_is_below_the_command_line_and_knows_no_hydra(module):
    assert layer_of(module) == layer_of("runner.experiment")
    reached = [module, *reached_from(module)]
    crossing = sorted(
        f"{name} (by {by})"
        for by in reached
        for name in MODULES[by]
        if within(name, "hydra", "hydra_plugins", "runner.cli")
    )
    assert not crossing, f"{module} imports {crossing}, directly or through the modules it imports"


@pytest.mark.parametrize("module", MATH)
def test_the_step_and_validation_neither_print_log_nor_save(module):
    crossing = sorted(
        name for name in reached_from(module) if within(name, "runner.observe", "runner.checkpoint")
    )
    assert not crossing, f"{module} imports {crossing}, directly or through the modules it imports"


def test_checkpoint_observe_and_precision_never_import_the_engine():
    for module in MODULES:
        if within(module, "runner.checkpoint", "runner.observe", "runner.training.precision"):
            crossing = [
                name
                for name in MODULES[module]
                if within(name, "runner.training.engine", "runner.training.step")
            ]
            assert not crossing, f"{module} imports {crossing}"


def test_nothing_below_the_command_line_knows_hydra_or_imports_it():
    for module, names in MODULES.items():
        if within(module, *CLI):
            continue
        crossing = [name for name in names if within(name, "hydra", "hydra_plugins", "runner.cli")]
        assert not crossing, f"{module} imports {crossing}"


# Inside the command line, Hydra is the adapter's (cli/hydra/). The one exception: the command line's
# grammar is Hydra's override grammar, which arguments.py parses once with Hydra's own parser.
HYDRA_ADAPTER = "runner.cli.hydra"
HYDRA_GRAMMAR = {"runner.cli.arguments"}


def knows_hydra(module: str) -> list[str]:
    return sorted(name for name in MODULES[module] if within(name, "hydra", "hydra_plugins"))


@pytest.mark.parametrize("module", sorted(name for name in MODULES if within(name, *CLI)))
def test_only_the_hydra_adapter_imports_hydra(module):
    if within(module, HYDRA_ADAPTER) or module in HYDRA_GRAMMAR:
        return
    assert not knows_hydra(module), (
        f"{module} imports {knows_hydra(module)}: its Hydra part goes in cli/hydra/"
    )


@pytest.mark.parametrize("module", sorted(name for name in MODULES if within(name, HYDRA_ADAPTER)))
def test_the_hydra_adapter_holds_only_what_speaks_to_hydra(module):
    if module == HYDRA_ADAPTER:  # the folder's __init__
        return
    speaks = knows_hydra(module) + sorted(name for name in MODULES[module] if within(name, "omegaconf"))
    assert speaks, f"{module} imports neither Hydra nor OmegaConf: it belongs beside the commands"


@pytest.mark.parametrize("module", sorted(name for name in MODULES if within(name, "runner.cli.processes")))
def test_the_processes_import_neither_hydra_nor_its_adapter(module):
    """They read the parsed command line (arguments.py, Hydra's grammar), never Hydra's config."""
    adapter = sorted(name for name in [module, *reached_from(module)] if within(name, HYDRA_ADAPTER))
    assert not knows_hydra(module) and not adapter, f"{module} imports {knows_hydra(module) + adapter}"


@pytest.mark.parametrize("module", sorted(name for name in MODULES if within(name, *CLI)))
def test_the_command_line_holds_no_search_code(module):
    """The search (Optuna's study, its trials, samplers and distributions) is runner.search's; the
    command line reads Hydra's sweep syntax and hands the search plain values."""
    optuna = sorted(name for name in MODULES[module] if within(name, "optuna"))
    assert not optuna, f"{module} imports {optuna}: search code goes in runner/search/"


def test_only_hydras_public_api():
    plugins = PACKAGE.parent / "hydra_plugins"
    for path in [
        *PACKAGE.rglob("*.py"),
        *plugins.rglob("*.py"),
        *PACKAGE.parents[1].joinpath("tests").rglob("*.py"),
    ]:
        private = [name for name in imports_of(path) if "hydra._internal" in name]
        assert not private, f"{path} imports {private}"


def test_no_import_cycles():
    graph = {module: runner_imports(module) - {module} for module in MODULES}
    # A package's __init__ is imported with any of its modules; it is not an edge of its own.
    graph = {
        module: {name for name in names if not module.startswith(name + ".")}
        for module, names in graph.items()
    }
    visiting, done = [], set()

    def visit(module: str) -> None:
        if module in done:
            return
        assert module not in visiting, "import cycle: " + " -> ".join(
            [*visiting[visiting.index(module) :], module]
        )
        visiting.append(module)
        for name in sorted(graph[module]):
            visit(name)
        visiting.pop()
        done.add(module)

    for module in sorted(graph):
        visit(module)


# A function a reader can hold in their head: the cap is on functions, so a module is split where its
# concepts part, not where a line count says. A long module is only named, as a hint to look.
MAX_FUNCTION_LINES = 80
LONG_MODULE_LINES = 350
SOURCES = sorted(PACKAGE.parent.rglob("*.py"))  # runner and its Hydra plugins


def functions_of(path: Path) -> list[tuple[str, int]]:
    """Every function and method in ``path`` (nested ones too), with its length in lines."""
    return [
        (node.name, node.end_lineno - node.lineno + 1)
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    ]


@pytest.mark.parametrize("path", SOURCES, ids=lambda path: str(path.relative_to(PACKAGE.parent)))
def test_no_function_is_longer_than_a_reader_holds_in_their_head(path):
    long = [f"{name} ({lines} lines)" for name, lines in functions_of(path) if lines > MAX_FUNCTION_LINES]
    assert not long, f"{path.relative_to(PACKAGE.parent)}: {', '.join(long)}; split by concept"


def test_the_function_that_runs_a_training_process_reads_top_to_bottom():
    """The run's phases (resume point, assembly, records, fit) are named; their caller only orders them."""
    lengths = dict(functions_of(PACKAGE / "experiment" / "train.py"))
    assert lengths["train_in_this_process"] <= 50


def test_long_modules_are_named_not_refused():
    """A warning, not a failure: a long module whose one concept is long is allowed."""
    for path in SOURCES:
        if (lines := len(path.read_text().splitlines())) > LONG_MODULE_LINES:
            name = path.relative_to(PACKAGE.parent)
            warnings.warn(f"{name} has {lines} lines: does it hold one concept?", stacklevel=1)
