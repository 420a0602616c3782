"""``python -m runner COMMAND [overrides]``."""

from runner.cli.main import main

if __name__ == "__main__":
    main()
