"""The Hydra adapter, through Hydra's public API: runner's configs and schema for Hydra, the checks on
overrides before it composes, its callbacks (start checks, a new run's directory, a sweep's job
directories and summary), a run's or sweep's folder guarded before it writes, and Optuna's search space
read from its sweep syntax."""
