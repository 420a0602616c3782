"""The commands besides ``train``: ``eval``, ``report``, ``consolidate``, ``export``, ``doctor`` and
``lr_find``."""

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from runner.cli.arguments import CommandLine
from runner.cli.exits import exit_with
from runner.cli.hydra.hydra_app import check_command_line, config_folders, run_hydra
from runner.cli.hydra.job import build, output_dir
from runner.config.checks import check_value
from runner.config.errors import ConfigError, UserError
from runner.config.schema import RunConfig
from runner.config.typed import typed_config
from runner.experiment.undo import remove_new_run_dir

log = logging.getLogger("runner")
# doctor writes nothing: no run directory, no record, no log file. Its name heads its --help.
WRITE_NOTHING = ("hydra.run.dir=.", "hydra.output_subdir=null", "hydra/job_logging=disabled",
                 "hydra/hydra_logging=disabled", "hydra.job.name=doctor")  # fmt: skip
HELP_FLAGS = ("-h", "--help")
EVAL_HELP = """usage: python -m runner eval ckpt=FILE [split=val|test] [device=auto|cpu|cuda|cuda:N|mps]
                            [allow_targets=TARGET[,TARGET...]]

Metrics of a checkpoint (val/loss and every configured metric) on the validation split, or with
split=test on the test split the data set returns third. The model and data are rebuilt from the
config stored in the checkpoint; with ema, the averaged weights are evaluated. Writes nothing.

  ckpt=FILE            a checkpoint, e.g. outputs/<date>/<time>-<suffix>/checkpoints/best.pt, a
                       sharded one's folder (strategy=fsdp: checkpoints/best), or a run directory
                       (its best.pt; without one, its newest checkpoint)
  split=val|test       which split (default val)
  device=...           where to evaluate (default auto: cuda, else mps, else cpu)
  allow_targets=A,B    _target_s of your own code the stored config may build (runner's own are
                       always allowed, and in a project those its config folder names); your code
                       must be importable (a project's is; else PYTHONPATH)
"""
REPORT_HELP = """usage: python -m runner report DIR

Rebuilds summary.csv, summary.md and summary.png in DIR from the files its runs wrote: DIR is a
sweep directory (outputs/multirun/<date>/<time>-<suffix>, one row per job; unfinished jobs show as
incomplete) or a single run directory. Prints the table.
"""
CONSOLIDATE_HELP = """usage: python -m runner consolidate DIR [--output FILE]

Writes a sharded checkpoint (a strategy=fsdp run's checkpoints/best, last or step_<N> folder, or the
newest one of a run directory) as one plain file that torch.load(FILE, weights_only=True) reads, with
a plain checkpoint's keys (model_state_dict with whole tensors, optimizer_state_dict, epoch, best_val,
...): for eval, export, or a single-GPU run. Runs in one process, without a GPU.

  DIR            a sharded checkpoint folder, or a run directory
  --output FILE  where to write (default <run dir>/consolidated/<name>.pt); an existing file is kept
"""
EXPORT_HELP = """usage: python -m runner export RUN --format safetensors|peft [--output DIR]
                              [allow_targets=TARGET[,TARGET...]]

Writes a run's trained model in its library's own format, loaded as runner.load_model loads it (the
best.pt of a run directory, else its newest checkpoint; with ema, the averaged weights; a
checkpoint.trainable_only checkpoint's frozen base rebuilt from the config and checked by its sha256).

  RUN                   a run directory or a checkpoint file
  --format safetensors  every weight, as DIR/model.safetensors (safetensors' save_file)
  --format peft         the adapter of a peft model (peft's save_pretrained: adapter_config.json and
                        adapter_model.safetensors, which PeftModel.from_pretrained loads)
  --output DIR          where (default <run dir>/export/<format>); an existing DIR is kept, not overwritten
  allow_targets=A,B     _target_s of your own code the stored config may build, as for eval
"""
LR_FIND_RANGE = {"--min-lr": 1e-6, "--max-lr": 10.0, "--steps": 100}  # lr_find's flags, their defaults
LR_FIND_DIR = "hydra.run.dir=outputs/lr_find/${now:%Y-%m-%d}/${now:%H-%M-%S}-${unique_suffix:}"


def main_eval(arguments: list[str]) -> None:
    """``python -m runner eval ckpt=FILE [split=val|test] [device=...] [allow_targets=A,B]``: a
    checkpoint's metrics on the validation (or test) split, with the model and data rebuilt from the
    config stored in it: from runner's own ``_target_``s, and those ``allow_targets`` names."""
    if any(argument in HELP_FLAGS for argument in arguments):
        print(EVAL_HELP, end="")
        raise SystemExit(0)
    from runner.checkpoint.locate import checkpoint_to_evaluate
    from runner.config.trust import folder_targets
    from runner.tools.evaluation import SPLITS, evaluate_checkpoint

    options = dict(argument.split("=", 1) for argument in arguments if "=" in argument)
    try:
        known = {"ckpt", "device", "split", "allow_targets"}
        unknown = set(options) - known or {a for a in arguments if "=" not in a}
        if unknown or "ckpt" not in options:
            raise ConfigError(
                "eval takes ckpt=FILE and optionally split=val|test, device=... and "
                "allow_targets=TARGET[,TARGET...]; got " + (" ".join(arguments) or "nothing")
            )
        device, split = options.get("device", "auto"), options.get("split", "val")
        check_value("device", device)
        if split not in SPLITS:
            raise ConfigError(f"split={split} is not allowed; split must be one of {', '.join(SPLITS)}")
        allowed = {target for target in options.get("allow_targets", "").split(",") if target}
        # runner's own, and in a project those its config folder names (the user's own code).
        trusted = set().union(*(folder_targets(folder) for folder in config_folders(None))) | allowed
        if not options["ckpt"]:
            raise ConfigError("ckpt= names nothing; give a checkpoint file or a run directory")
        checkpoint = checkpoint_to_evaluate(Path(options["ckpt"]))
        metrics = evaluate_checkpoint(checkpoint, device, build, split, trusted)
    except UserError as error:
        exit_with(error)
    print(" ".join(f"{name} {value:.6g}" if isinstance(value, float) else f"{name} {value}"
                   for name, value in metrics.items()))  # fmt: skip


def main_report(arguments: list[str]) -> None:
    """``python -m runner report DIR``: rebuild a sweep's (or a run's) summary from its files."""
    if any(argument in HELP_FLAGS for argument in arguments):
        print(REPORT_HELP, end="")
        raise SystemExit(0)
    from runner.checkpoint.durable import WriteError
    from runner.config.job_dirs import numbered
    from runner.tools.report import write_summary

    if len(arguments) != 1:
        got = " ".join(arguments) or "nothing"
        exit_with(ConfigError(f"report takes one directory (a sweep or a run); got {got}"))
    directory = numbered(Path(arguments[0]))  # <sweep dir>/3: job 3, whatever else its name holds
    if not directory.is_dir():
        what = "it is a file" if directory.exists() else "there is no such directory"
        exit_with(
            ConfigError(
                f"report {arguments[0]}: {what}; give a sweep's or a run's directory "
                "(outputs/multirun/<date>/<time>-<suffix>, outputs/<date>/<time>-<suffix>)"
            )
        )
    try:
        write_summary(directory)
    except FileNotFoundError as error:
        exit_with(ConfigError(str(error)))
    except WriteError as error:  # the runs' own files are only read
        exit_with(error if error.advice else error.with_advice("free space or make it writable and rerun"))
    print((directory / "summary.md").read_text(), end="")
    print(f"wrote {directory / 'summary.csv'}, {directory / 'summary.md'}, {directory / 'summary.png'}")


def main_consolidate(arguments: list[str]) -> None:
    """``python -m runner consolidate DIR [--output FILE]``."""
    if any(argument in HELP_FLAGS for argument in arguments):
        print(CONSOLIDATE_HELP, end="")
        raise SystemExit(0)
    from runner.tools.consolidate import consolidate

    rest = list(arguments)
    output = None
    if "--output" in rest:
        at = rest.index("--output")
        if at + 1 >= len(rest):
            exit_with(ConfigError("consolidate: --output takes a file name"))
        output = Path(rest.pop(at + 1))
        rest.pop(at)
    if len(rest) != 1 or rest[0].startswith("-"):
        got = " ".join(arguments) or "nothing"
        exit_with(
            ConfigError(
                f"consolidate takes one checkpoint folder or run directory [--output FILE]; got {got}"
            )
        )
    try:
        folder, written = consolidate(Path(rest[0]), output)
    except UserError as error:
        exit_with(error)
    print(f"wrote {written} (from {folder})")


def main_export(arguments: list[str]) -> None:
    """``python -m runner export RUN --format safetensors|peft [--output DIR] [allow_targets=A,B]``."""
    if any(argument in HELP_FLAGS for argument in arguments):
        print(EXPORT_HELP, end="")
        raise SystemExit(0)
    from runner.config.trust import folder_targets
    from runner.tools.export import FORMATS, export_run

    rest, flags = list(arguments), {}
    try:
        for flag in ("--format", "--output"):
            if flag in rest:
                at = rest.index(flag)
                if at + 1 >= len(rest):
                    raise ConfigError(f"export: {flag} takes a value")
                flags[flag] = rest.pop(at + 1)
                rest.pop(at)
        allowed = {
            t for a in rest if a.startswith("allow_targets=") for t in a.split("=", 1)[1].split(",") if t
        }
        rest = [argument for argument in rest if not argument.startswith("allow_targets=")]
        if len(rest) != 1 or rest[0].startswith("-") or "--format" not in flags:
            got = " ".join(arguments) or "nothing"
            raise ConfigError(
                f"export takes a run directory or checkpoint and --format {'|'.join(FORMATS)} "
                f"[--output DIR] [allow_targets=A,B]; got {got}"
            )
        trusted = set().union(*(folder_targets(folder) for folder in config_folders(None))) | allowed
        output = Path(flags["--output"]) if "--output" in flags else None
        written = export_run(Path(rest[0]), flags["--format"], output, build, trusted)
    except UserError as error:
        exit_with(error)
    print(f"wrote {written} ({flags['--format']})")


def checked(command: str, arguments: list[str], flags: tuple[str, ...] = ()) -> CommandLine:
    """``command``'s command line, parsed and checked (``flags``: the command's own, besides Hydra's); a
    mistake exits with its one-line error. doctor and lr_find look at one configuration: no sweeps."""
    try:
        command_line = CommandLine.parse(arguments)
        if command_line.sweep:
            raise ConfigError(
                f"{command} looks at one configuration, so it takes no -m/--multirun (sweeps are for "
                f"train); run {command} once per setting"
            )
        check_command_line(command_line, flags)
    except UserError as error:
        exit_with(error)
    return command_line


def task_setup(cfg: DictConfig, check_fit: bool = False) -> tuple[RunConfig, Any]:
    """The typed config and what train would build from it (for doctor and lr_find), with the model
    and data tried on one batch if asked; a bad setting exits with its one-line error, leaving no
    run directory."""
    from runner.experiment.setup import prepare
    from runner.training.fit_check import check_fit as try_first_batch
    from runner.training.seeding import draw_seed

    try:
        config = typed_config(cfg)
        seed = config.seed if config.seed is not None else draw_seed()
        prepared = prepare(config, build, seed)
        if check_fit:
            first = next(iter(prepared.train_loader))
            try_first_batch(prepared.parts.model, first, prepared.parts.loss_fn, prepared.device,
                            prepared.precision.autocast, config.data.target_key)  # fmt: skip
        return config, prepared
    except UserError as error:
        remove_new_run_dir(output_dir(), keep=Path.cwd())
        exit_with(error)


def optimizer_factory(config: RunConfig) -> Callable[[Any], Any]:
    """A fresh optimizer over a given model's parameters, as the config says (doctor and lr_find
    train throw-away copies)."""
    from runner.experiment.setup import build_optimizer

    return lambda model: build_optimizer(build, config, model)


def doctor_task(cfg: DictConfig, as_json: bool) -> None:
    from runner.tools.doctor import FAIL, Setup, format_table, run_checks, to_json

    config, prepared = task_setup(cfg)
    try:  # as train, which builds its optimizer before writing: a setting only it checks is refused
        optimizer_factory(config)(prepared.parts.model)
    except UserError as error:
        exit_with(error)
    setup = Setup.of(config, prepared, optimizer_factory(config))
    results = run_checks(setup)
    print(to_json(results) if as_json else format_table(results))
    raise SystemExit(1 if any(result.status == FAIL for result in results) else 0)


def main_doctor(arguments: list[str]) -> None:
    """``python -m runner doctor [overrides] [--json]``: builds what train would, writes nothing."""
    command_line = checked("doctor", arguments, flags=("--json",))
    as_json = command_line.has_flag("--json")
    run_hydra(lambda cfg: doctor_task(cfg, as_json), command_line.without("--json").plus(*WRITE_NOTHING))


def lr_find_task(cfg: DictConfig, sweep: dict[str, float]) -> None:
    from runner.checkpoint.durable import WriteError
    from runner.tools.lr_find import find_lr, record

    config, prepared = task_setup(cfg, check_fit=True)
    run_dir = output_dir()
    low, high, steps = sweep["--min-lr"], sweep["--max-lr"], int(sweep["--steps"])
    try:  # a refusal that needs the optimizer built (several: optimizers) writes nothing either
        curve = find_lr(
            prepared.parts.model, optimizer_factory(config), prepared.parts.loss_fn, prepared.train_loader,
            prepared.device, prepared.precision, config.clip, target_key=config.data.target_key,
            min_lr=low, max_lr=high, num_steps=steps,
        )  # fmt: skip
    except UserError as error:
        remove_new_run_dir(run_dir, keep=Path.cwd())
        exit_with(error)
    try:
        plot = record(curve, run_dir)
    except WriteError as error:
        for path in (error.path, run_dir / "lr_find.log"):  # nothing empty is left: an event file, the log
            if path.is_file() and path.stat().st_size == 0:
                path.unlink()
        found = f"optimizer.lr={curve.suggestion:.3g} suggested" if curve.suggestion else "no suggestion"
        exit_with(error.with_advice(f"the curve is not saved ({found}); free space and run lr_find again"))
    diverged = (
        f"the loss diverged at lr {curve.diverged_at:.3g}"
        if curve.diverged_at
        else f"no divergence up to lr {high:g}"
    )
    log.info("lr_find: %d steps from lr %g; %s; curve in %s%s", len(curve.lrs), low, diverged,
             run_dir, f" and {plot}" if plot else " (no plot: matplotlib is not installed)")  # fmt: skip
    if curve.suggestion is None:
        log.warning(
            "lr_find: the loss never fell clearly between lr %g and %g in %d steps; no suggestion: try a "
            "wider range (--min-lr=%g --max-lr=%g), more steps (--steps=%d) or a larger batch "
            "(data.batch_size=%d)",
            low, high, steps, low / 100, high * 10, steps * 3, config.data.batch_size * 4,
        )  # fmt: skip
        raise SystemExit(1)
    print(f"suggested: optimizer.lr={curve.suggestion:.3g}")


def main_lr_find(arguments: list[str]) -> None:
    """``python -m runner lr_find [overrides] [--min-lr=X] [--max-lr=X] [--steps=N]``: curve and plot
    under outputs/lr_find/."""
    command_line = checked("lr_find", arguments, flags=tuple(LR_FIND_RANGE))
    try:
        sweep = lr_find_range(command_line)
    except UserError as error:
        exit_with(error)
    command_line = command_line.without(*(a for a in arguments if a.split("=", 1)[0] in LR_FIND_RANGE))
    if command_line.last("hydra.run.dir") is None:
        command_line = command_line.plus(LR_FIND_DIR)
    run_hydra(lambda cfg: lr_find_task(cfg, sweep), command_line.plus("hydra.job.name=lr_find"))


def lr_find_range(command_line: CommandLine) -> dict[str, float]:
    """The rates and the number of steps lr_find tries: its defaults, and the flags given."""
    chosen = dict(LR_FIND_RANGE)
    for argument in command_line.arguments:
        name, given, text = argument.partition("=")
        if name not in LR_FIND_RANGE:
            continue
        try:
            value = int(text) if name == "--steps" else float(text)
        except ValueError:
            value = 0
        if not given or not value > 0 or (name == "--steps" and value < 2):
            kind = "a whole number >= 2" if name == "--steps" else "a number > 0"
            raise ConfigError(f"{argument}: {name} takes {kind}, as {name}=VALUE")
        chosen[name] = value
    if not chosen["--min-lr"] < chosen["--max-lr"]:
        raise ConfigError(f"--min-lr={chosen['--min-lr']:g} must be below --max-lr={chosen['--max-lr']:g}")
    return chosen
