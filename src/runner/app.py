"""The Hydra application: the one module that knows Hydra.

It checks the command line, composes and validates the config, builds the components with
``instantiate`` and hands plain objects to the engine.
"""

import logging
import math
import os
import secrets
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

import hydra
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from runner import compose_ahead
from runner.checks import ConfigError, UserError, check_top_level_key, check_value, validate_config
from runner.schema import DataConfig, RunConfig

log = logging.getLogger("runner")


def config_dir() -> Path:
    """``conf/`` inside an installed wheel, else the repository's top-level ``conf/``."""
    packaged = Path(__file__).with_name("conf")
    return packaged if packaged.is_dir() else Path(__file__).resolve().parents[2] / "conf"


CONFIG_DIR = config_dir()
# A few random characters after the timestamp: runs and sweeps started in the same second get
# their own directories. Cached like Hydra's own ${now:}, so every job of a sweep sees one value.
OmegaConf.register_new_resolver("unique_suffix", lambda: secrets.token_hex(2), use_cache=True, replace=True)
ConfigStore.instance().store(name="runner_schema", node=RunConfig)
ConfigStore.instance().store(group="data", name="base_data", node=DataConfig)

# Hydra's flags that choose another primary config or config directory.
CONFIG_LOCATION_FLAGS = {"-cn", "--config-name", "-cp", "--config-path", "-cd", "--config-dir"}
# Command-line flags of Hydra's that take the next argument as their value.
HYDRA_FLAGS_WITH_VALUE = {
    "-c", "--cfg", "-p", "--package", "-cp", "--config-path",
    "-cn", "--config-name", "-cd", "--config-dir", "--experimental-rerun", "-i", "--info",
}  # fmt: skip


def override_arguments(arguments: Sequence[str]) -> list[str]:
    """The ``key=value`` overrides among Hydra's command-line arguments."""
    overrides, skip_next = [], False
    for argument in arguments:
        if skip_next:
            skip_next = False
        elif argument in HYDRA_FLAGS_WITH_VALUE:
            skip_next = True
        elif not argument.startswith("-") and "=" in argument:
            overrides.append(argument)
    return overrides


def group_names() -> set[str]:
    return {path.name for path in CONFIG_DIR.iterdir() if path.is_dir()}


def check_command_line(arguments: Sequence[str]) -> None:
    """Check override values (every value of a sweep) before Hydra composes or writes anything."""
    overrides = override_arguments(arguments)
    if not overrides:
        return
    custom_primary = any(a in ("-cn", "--config-name") or a.startswith("--config-name=") for a in arguments)
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException:
        return  # Hydra reports its own syntax errors, with the position of the mistake.
    for override in parsed:
        key = override.key_or_group
        if override.is_hydra_override() or override.is_delete():
            continue
        if not (override.is_add() or override.is_force_add() or custom_primary):
            check_top_level_key(key, given=override.input_line or key, extra_known=group_names())
        if override.is_interval_sweep():
            values = [override.value().start, override.value().end]
        elif override.is_sweep_override():
            values = list(override.sweep_iterator())
        else:
            values = [override.value()]
        for value in values:
            check_value(key, value)


def plain_config(cfg: DictConfig) -> dict[str, Any]:
    """The resolved config as plain Python values, naming the key of anything missing."""
    try:
        return OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    except OmegaConfBaseException as error:
        key = getattr(error, "full_key", None) or "?"
        raise ConfigError(f"{key} has no value; set it in the config or on the command line") from None


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="config")
def hydra_train(cfg: DictConfig) -> float | None:
    """One run, or one job of a sweep. A failed sweep job records its failure (traceback in its log,
    ``result.json``) and returns NaN, so the other jobs and the sweep's summary still run."""
    from runner.results import write_result
    from runner.train import train

    hydra_config = HydraConfig.get()
    run_dir = Path(hydra_config.runtime.output_dir)
    in_sweep = hydra_config.mode == RunMode.MULTIRUN
    swept_keys = [override_key(o) for o in hydra_config.overrides.task]
    started = time.time()

    def record(status: str, **details: Any) -> None:
        # Rank 0 alone: ranks that fail at the same step would otherwise write one file at once.
        if int(os.environ.get("RANK", 0)) == 0:
            write_result(run_dir, status, time.time() - started, **details)

    with submitit_tasks_as_ranks(run_dir):
        try:
            config = plain_config(cfg)
            validate_config(config)
            best = train(config, run_dir, build=hydra.utils.instantiate, hparam_keys=swept_keys)
        except UserError as error:
            if not in_sweep:
                exit_with(error)  # bad input writes nothing beyond Hydra's own files
            record("failed", error=str(error))
            log.error("job failed: %s", error)
            return math.nan
        except Exception as error:
            record("failed", error=f"{type(error).__name__}: {error}")
            if not in_sweep:
                raise
            log.exception("job failed")
            return math.nan
        record("ok", best=best)
        return best


@contextmanager
def submitit_tasks_as_ranks(run_dir: Path) -> Iterator[None]:
    """A submitit job's tasks run as one distributed run (see ``join_submitit_tasks``). Hydra has
    already set up each task's logging by then, so the other ranks' is redone here as torchrun's gets
    it from overrides: warnings and errors only, to ``train.rank<N>.log``."""
    from runner.distributed import join_submitit_tasks, stop_process_group

    if not join_submitit_tasks():
        yield
        return
    rank = int(os.environ["RANK"])
    if rank != 0:
        root = logging.getLogger()
        for handler in [h for h in root.handlers if isinstance(h, logging.FileHandler)]:
            root.removeHandler(handler)
            handler.close()
            rank_file = logging.FileHandler(run_dir / f"train.rank{rank}.log")
            rank_file.setFormatter(handler.formatter)
            root.addHandler(rank_file)
        for handler in root.handlers:  # also for loggers with levels of their own (submitit's)
            handler.setLevel(logging.WARNING)
    try:
        yield
    finally:
        stop_process_group()


def exit_with(error: UserError) -> NoReturn:
    print(f"runner: error: {error}", file=sys.stderr)
    raise SystemExit(2) from None


def override_key(override_text: str) -> str:
    (override,) = OverridesParser.create().parse_overrides([override_text])
    return override.key_or_group


def resume_arguments(arguments: Sequence[str]) -> list[str]:
    """``resume=...`` continues the same run: same directory, and the run's original overrides
    under the ones given now. Hydra's record of this invocation goes to ``.hydra/resume-<time>``
    so the original one is kept."""
    overrides = override_arguments(arguments)
    requests = [o for o in overrides if override_key(o) == "resume"]
    if not requests or requests[-1].split("=", 1)[1] in ("auto", "null"):
        return list(arguments)  # resume=auto looks in the run's own directory, once Hydra has made it
    from runner.resume import locate_checkpoint, original_overrides

    path = locate_checkpoint(requests[-1].split("=", 1)[1], Path.cwd() / "outputs")
    run_dir = path.parent.parent
    given = {override_key(o) for o in overrides}
    original = [o for o in original_overrides(run_dir) if override_key(o) not in given]
    kept = [a for a in arguments if a not in requests]
    stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
    return [
        *original, *kept, f"resume={path}",
        f"hydra.run.dir={run_dir}", f"hydra.output_subdir=.hydra/resume-{stamp}",
    ]  # fmt: skip


def distributed_arguments(arguments: list[str]) -> list[str]:
    """Under torchrun: start the process group, give every rank rank 0's run (or sweep) directory, and
    let only rank 0 keep Hydra's record; the other ranks log warnings and errors to their own file. A
    sweep runs its jobs one after another, each on every rank, with Hydra's basic launcher and sweeper."""
    from runner.distributed import shared_run_dir, start_process_group

    sweep = "-m" in arguments or "--multirun" in arguments
    overrides = override_arguments(arguments)
    if sweep:
        for override in overrides:
            if override_key(override).lstrip("+~") in ("hydra/launcher", "hydra/sweeper", "hparams_search"):
                raise ConfigError(
                    f"{override}: under torchrun a sweep runs each job on every rank, one job after another "
                    "(Hydra's basic launcher and sweeper); for parallel or Optuna sweeps of multi-process "
                    "jobs, use a submitit launcher with hydra.launcher.tasks_per_node instead of torchrun"
                )
    start_process_group()
    dir_key = "hydra.sweep.dir" if sweep else "hydra.run.dir"
    given = [o.split("=", 1)[1] for o in overrides if override_key(o) == dir_key]
    run_dir = shared_run_dir(given[-1] if given else None, "outputs/multirun" if sweep else "outputs")
    extra = [f"{dir_key}={run_dir}"]
    rank = int(os.environ["RANK"])
    if rank != 0:
        log_dir = "${hydra.runtime.output_dir}" if sweep else run_dir
        extra += [
            "hydra.output_subdir=null",
            f"hydra.job_logging.handlers.file.filename='{log_dir}/train.rank{rank}.log'",
            "hydra.job_logging.root.level=WARNING",
            "hydra.hydra_logging.root.level=WARNING",
        ]
    return [*arguments, *extra]


def config_may_set_run_mode(arguments: Sequence[str]) -> bool:
    """Whether a config other than runner's own could set ``hydra.mode``: another primary config, an
    extra search path, or a ``hydra.mode`` override. Runner's shipped configs never set it."""
    if any(a.split("=", 1)[0] in CONFIG_LOCATION_FLAGS for a in arguments):
        return True
    keys = [override_key(o).lstrip("+~") for o in override_arguments(arguments)]
    return any(key.startswith(("hydra.mode", "hydra.searchpath")) for key in keys)


def skip_run_mode_detection() -> None:
    """Hydra composes the whole config once only to read ``hydra.mode`` (about 0.2 s of start-up),
    then again to run. Where no config can set it, its answer is "not set", and the command line's
    -m decides, exactly as Hydra then does: skip that first composition."""
    from hydra._internal.hydra import Hydra

    Hydra.get_mode = lambda self, config_name, overrides: None


def only_overrides(arguments: Sequence[str]) -> bool:
    """A plain run: ``key=value`` overrides and no Hydra flags (no sweep, no --cfg, --help or --info)."""
    return not any(argument.startswith("-") for argument in arguments)


def picks_an_unshipped_option(arguments: Sequence[str]) -> bool:
    """Whether an override picks an option runner's config groups do not have (``model=nope``): Hydra's
    composition will fail, and its error should come at once, not after torch is imported."""
    groups = group_names()
    for override in override_arguments(arguments):
        key, _, option = override.partition("=")
        group = key.lstrip("+~").split("@")[0]
        shipped = (CONFIG_DIR / group / f"{option}.yaml").is_file()
        if group in groups and option not in ("", "null") and not shipped:
            return True
    return False


def main_train(arguments: Sequence[str]) -> None:
    distributed = int(os.environ.get("WORLD_SIZE", 1)) > 1
    try:
        check_command_line(arguments)
        arguments = resume_arguments(arguments)
        if distributed:
            arguments = distributed_arguments(arguments)
    except UserError as error:
        exit_with(error)
    plain_run = not config_may_set_run_mode(arguments)
    if plain_run:
        skip_run_mode_detection()
    sys.argv = [sys.argv[0], *arguments]
    if (
        plain_run
        and not distributed
        and only_overrides(arguments)
        and not picks_an_unshipped_option(arguments)
        and compose_ahead.worthwhile()
    ):
        composed = compose_ahead.compose_in_child(hydra_train)
        import runner.train  # noqa: F401 (torch and runner's modules, while the child composes)

        composed.install()
    try:
        hydra_train()
    finally:
        if distributed:
            from runner.distributed import stop_process_group

            stop_process_group()


def main_eval(arguments: Sequence[str]) -> None:
    """``python -m runner eval ckpt=FILE [device=...]``: validation metrics of a checkpoint, with
    the model and data rebuilt from the config stored in it."""
    from runner.evaluation import evaluate_checkpoint

    options = dict(argument.split("=", 1) for argument in arguments if "=" in argument)
    try:
        unknown = set(options) - {"ckpt", "device"} or {a for a in arguments if "=" not in a}
        if unknown or "ckpt" not in options:
            raise ConfigError(
                f"eval takes ckpt=FILE and optionally device=...; got {' '.join(arguments) or 'nothing'}"
            )
        device = options.get("device", "auto")
        check_value("device", device)
        metrics = evaluate_checkpoint(Path(options["ckpt"]), device, build=hydra.utils.instantiate)
    except UserError as error:
        exit_with(error)
    print(" ".join(f"{name} {value:.6g}" if isinstance(value, float) else f"{name} {value}"
                   for name, value in metrics.items()))  # fmt: skip


def main_report(arguments: Sequence[str]) -> None:
    """``python -m runner report DIR``: rebuild a sweep's (or a run's) summary from its files."""
    from runner.report import write_summary

    if len(arguments) != 1 or not Path(arguments[0]).is_dir():
        exit_with(
            ConfigError(
                f"report takes one directory (a sweep or a run); got {' '.join(arguments) or 'nothing'}"
            )
        )
    directory = Path(arguments[0])
    try:
        write_summary(directory)
    except FileNotFoundError as error:
        exit_with(ConfigError(str(error)))
    print((directory / "summary.md").read_text(), end="")
    print(f"wrote {directory / 'summary.csv'}, {directory / 'summary.md'}, {directory / 'summary.png'}")


def task_setup(cfg: DictConfig) -> tuple[dict[str, Any], Any]:
    """The validated config and what train would build from it (for doctor and lr_find); a bad
    setting exits with its one-line error."""
    from runner.train import prepare

    try:
        config = plain_config(cfg)
        validate_config(config)
        seed = config["seed"] if config["seed"] is not None else secrets.randbelow(2**32)
        return config, prepare(config, hydra.utils.instantiate, seed)
    except UserError as error:
        exit_with(error)


def optimizer_factory(config: dict[str, Any]) -> Callable[[Any], Any]:
    """A fresh optimizer over a given model's parameters, as the config says (doctor and lr_find
    train throw-away copies)."""
    from runner.train import build_component

    return lambda model: build_component(
        hydra.utils.instantiate, "optimizer", config["optimizer"], model.parameters()
    )


DOCTOR_JSON = {"enabled": False}


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="config")
def hydra_doctor(cfg: DictConfig) -> None:
    from runner.doctor import FAIL, Setup, format_table, run_checks, to_json

    config, prepared = task_setup(cfg)
    setup = Setup(
        model=prepared.parts.model,
        optimizer_factory=optimizer_factory(config),
        loss_fn=prepared.parts.loss_fn,
        train_loader=prepared.train_loader,
        val_loader=prepared.val_loader,
        device=prepared.device,
        precision=prepared.precision,
        clip=config["clip"],
    )
    results = run_checks(setup)
    print(to_json(results) if DOCTOR_JSON["enabled"] else format_table(results))
    raise SystemExit(1 if any(result.status == FAIL for result in results) else 0)


def main_doctor(arguments: Sequence[str]) -> None:
    """``python -m runner doctor [overrides] [--json]``: builds what train would, writes nothing."""
    DOCTOR_JSON["enabled"] = "--json" in arguments
    arguments = [a for a in arguments if a != "--json"]
    try:
        check_command_line(arguments)
    except UserError as error:
        exit_with(error)
    quiet = ["hydra.run.dir=.", "hydra.output_subdir=null", "hydra/job_logging=disabled",
             "hydra/hydra_logging=disabled"]  # fmt: skip
    sys.argv = [sys.argv[0], *arguments, *quiet]
    hydra_doctor()


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="config")
def hydra_lr_find(cfg: DictConfig) -> None:
    from runner.lr_find import find_lr, record

    config, prepared = task_setup(cfg)
    run_dir = Path(HydraConfig.get().runtime.output_dir)

    curve = find_lr(
        prepared.parts.model, optimizer_factory(config), prepared.parts.loss_fn, prepared.train_loader,
        prepared.device, prepared.precision, config["clip"],
    )  # fmt: skip
    plot = record(curve, run_dir)
    diverged = (
        f"the loss diverged at lr {curve.diverged_at:.3g}"
        if curve.diverged_at
        else "no divergence up to lr 10"
    )
    log.info("lr_find: %d steps from lr 1e-06; %s; curve in %s%s", len(curve.lrs), diverged,
             run_dir, f" and {plot}" if plot else " (no plot: matplotlib is not installed)")  # fmt: skip
    if curve.suggestion is None:
        log.warning(
            "lr_find: the loss never fell clearly; no suggestion (check the setup with runner doctor)"
        )
        raise SystemExit(1)
    print(f"suggested: optimizer.lr={curve.suggestion:.3g}")


def main_lr_find(arguments: Sequence[str]) -> None:
    """``python -m runner lr_find [overrides]``: curve and plot under outputs/lr_find/."""
    try:
        check_command_line(arguments)
    except UserError as error:
        exit_with(error)
    run_dir = "hydra.run.dir=outputs/lr_find/${now:%Y-%m-%d}/${now:%H-%M-%S}-${unique_suffix:}"
    given = any(override_key(o) == "hydra.run.dir" for o in override_arguments(arguments))
    sys.argv = [sys.argv[0], *arguments, *([] if given else [run_dir]), "hydra.job.name=lr_find"]
    hydra_lr_find()
