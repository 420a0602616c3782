"""The one check that a monitored metric is one the run logs. It runs on the config before anything
is built (the metrics configured), and in the engine after each validation (what validation gave: a
metric that counted nothing, accuracy on a regression, gives no value)."""

from collections.abc import Collection, Mapping

from runner.config.errors import ConfigError


def check_monitored(monitors: Mapping[str, str | None], logged: Collection[str]) -> None:
    """``monitors``: the metric each setting names, by the setting's key (``checkpoint.monitor``);
    ``None`` where it names none."""
    for key, monitor in monitors.items():
        if monitor is not None and monitor not in logged:
            raise ConfigError(
                f"{key}={monitor} is not logged by this run; it logs {', '.join(logged)} (monitor one of "
                "those, or add a metric with metrics=[...] or +metrics.NAME._target_=...)"
            )
