"""``python -m runner COMMAND [overrides]``."""

import sys

USAGE = """usage: python -m runner COMMAND [key=value ...] [hydra flags]

commands:
  train    train the configured experiment (python -m runner train --help for the config)
"""


def main() -> None:
    arguments = sys.argv[1:]
    if not arguments or arguments[0] in ("-h", "--help"):
        print(USAGE)
        raise SystemExit(0 if arguments else 2)
    command, rest = arguments[0], arguments[1:]
    if command == "train":
        from runner.app import main_train

        main_train(rest)
    else:
        print(f"runner: error: unknown command '{command}'\n\n{USAGE}", file=sys.stderr)
        raise SystemExit(2)


if __name__ == "__main__":
    main()
