"""runner's Optuna sweeper, a Hydra Sweeper plugin (Hydra finds plugins under ``hydra_plugins``).
The search itself is in ``runner.search``; this package adapts it to Hydra."""
