"""The processes a command runs as: torchrun's ranks and restarts, submitit's tasks, a sweep's workers
stopped together, the environment that says which process this is, and the start folder kept off
``sys.path``."""
