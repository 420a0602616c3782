"""``python -m runner COMMAND [overrides]``."""

from runner.cli.processes.start_folder import protect_sys_path

protect_sys_path()  # before anything else is imported: the start folder is data, not code

from runner.cli.main import main  # noqa: E402

if __name__ == "__main__":
    main()
