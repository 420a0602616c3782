"""``python -m runner COMMAND [overrides]``: the commands, and the one place they are dispatched."""

import sys

USAGE = """usage: python -m runner COMMAND [key=value ...] [hydra flags]

commands:
  train    train the configured experiment (python -m runner train --help for the config)
  eval     validation metrics of a checkpoint: python -m runner eval ckpt=FILE [device=cpu]
  report   summary table and plot of a sweep or run: python -m runner report DIR
  doctor   the debugging checklist, checked: python -m runner doctor [key=value ...] [--json]
  lr_find  learning-rate range test: python -m runner lr_find [key=value ...]
"""
COMMANDS = {  # command: (module, function); imported only when run, so --help stays instant
    "train": ("runner.cli.train", "main_train"),
    "eval": ("runner.cli.tools", "main_eval"),
    "report": ("runner.cli.tools", "main_report"),
    "doctor": ("runner.cli.tools", "main_doctor"),
    "lr_find": ("runner.cli.tools", "main_lr_find"),
}


def main(arguments: list[str] | None = None) -> None:
    arguments = sys.argv[1:] if arguments is None else arguments
    if not arguments or arguments[0] in ("-h", "--help"):
        print(USAGE)
        raise SystemExit(0 if arguments else 2)
    command, rest = arguments[0], arguments[1:]
    if command not in COMMANDS:
        print(f"runner: error: unknown command '{command}'\n\n{USAGE}", file=sys.stderr)
        raise SystemExit(2)
    module_name, function_name = COMMANDS[command]
    try:
        module = __import__(module_name, fromlist=[function_name])
        getattr(module, function_name)(rest)
    except KeyboardInterrupt:
        print("runner: aborted", file=sys.stderr)
        raise SystemExit(130) from None
