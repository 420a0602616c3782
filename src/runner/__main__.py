"""``python -m runner COMMAND [overrides]``."""

import sys

USAGE = """usage: python -m runner COMMAND [key=value ...] [hydra flags]

commands:
  train    train the configured experiment (python -m runner train --help for the config)
  eval     validation metrics of a checkpoint: python -m runner eval ckpt=FILE [device=cpu]
  report   summary table and plot of a sweep or run: python -m runner report DIR
  doctor   the seed's debugging order, checked: python -m runner doctor [key=value ...] [--json]
  lr_find  learning-rate range test: python -m runner lr_find [key=value ...]
"""


def main() -> None:
    arguments = sys.argv[1:]
    if not arguments or arguments[0] in ("-h", "--help"):
        print(USAGE)
        raise SystemExit(0 if arguments else 2)
    command, rest = arguments[0], arguments[1:]
    try:
        if command == "train":
            from runner.app import main_train

            main_train(rest)
        elif command == "doctor":
            from runner.app import main_doctor

            main_doctor(rest)
        elif command == "lr_find":
            from runner.app import main_lr_find

            main_lr_find(rest)
        elif command == "report":
            from runner.app import main_report

            main_report(rest)
        elif command == "eval":
            from runner.app import main_eval

            main_eval(rest)
        else:
            print(f"runner: error: unknown command '{command}'\n\n{USAGE}", file=sys.stderr)
            raise SystemExit(2)
    except KeyboardInterrupt:
        print("runner: aborted", file=sys.stderr)
        raise SystemExit(130) from None


if __name__ == "__main__":
    main()
