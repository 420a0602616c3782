"""``python -m runner COMMAND [overrides]``: the commands, and the one place they are dispatched."""

import os
import sys

USAGE = """usage: python -m runner COMMAND [key=value ...] [hydra flags]

commands:
  train    train the configured experiment: python -m runner train [key=value ...]
  eval     metrics of a checkpoint: python -m runner eval ckpt=FILE [split=val|test] [device=cpu]
  report   summary table and plot of a sweep or a run: python -m runner report DIR
  consolidate  a sharded checkpoint (strategy=fsdp) as one plain file:
           python -m runner consolidate DIR [--output FILE]
  export   a run's trained model in its library's format (safetensors, or a peft adapter):
           python -m runner export RUN --format safetensors|peft [--output DIR]
  doctor   the debugging checklist's 8 checks on what train would build, writing nothing:
           python -m runner doctor [key=value ...] [--json]
  lr_find  learning-rate range test: python -m runner lr_find [key=value ...]
  init     a new project folder (your model, data and configs): python -m runner init NAME
  verify-resume  whether the setup resumes exactly (trained, SIGKILLed, resumed, compared):
           python -m runner verify-resume [--steps N] [key=value ...]

python -m runner COMMAND --help shows a command's help (for train, doctor and lr_find: the config
groups and every setting with its default).
"""
COMMANDS = {  # command: (module, function); imported only when run, so --help stays instant
    "train": ("runner.cli.train", "main_train"),
    "eval": ("runner.cli.tools", "main_eval"),
    "report": ("runner.cli.tools", "main_report"),
    "consolidate": ("runner.cli.tools", "main_consolidate"),
    "export": ("runner.cli.tools", "main_export"),
    "doctor": ("runner.cli.tools", "main_doctor"),
    "lr_find": ("runner.cli.tools", "main_lr_find"),
    "verify-resume": ("runner.cli.verify", "main_verify_resume"),
    "init": ("runner.cli.init", "main_init"),
}


def main(arguments: list[str] | None = None) -> None:
    arguments = sys.argv[1:] if arguments is None else arguments
    if arguments and arguments[0] in ("-h", "--help"):
        print(USAGE)
        raise SystemExit(0)
    if not arguments or arguments[0] not in COMMANDS:
        given = f"unknown command '{arguments[0]}'" if arguments else "no command given"
        print(f"runner: error: {given}; the commands are {', '.join(COMMANDS)} (python -m runner --help)",
              file=sys.stderr)  # fmt: skip
        raise SystemExit(2)
    command, rest = arguments[0], arguments[1:]
    module_name, function_name = COMMANDS[command]
    from runner.cli.exits import exit_with
    from runner.cli.processes.environment import check_process_environment
    from runner.config.errors import UserError

    try:
        check_process_environment()
        from runner.cli.project import BUILDS_USER_CODE, enter

        if command in BUILDS_USER_CODE:  # the project this folder lies in: configs, defaults, code
            enter(code_importable=not any(argument in ("-h", "--help") for argument in rest))
    except UserError as error:
        exit_with(error)
    try:
        module = __import__(module_name, fromlist=[function_name])
        getattr(module, function_name)(rest)
    except KeyboardInterrupt:
        print("runner: aborted", file=sys.stderr)
        raise SystemExit(130) from None
    except BrokenPipeError:  # output piped into a reader that stopped (| head): nothing left to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(1) from None
