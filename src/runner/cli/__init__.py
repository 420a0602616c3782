"""The command line: the only layer that knows Hydra. Nothing else in runner imports it."""
