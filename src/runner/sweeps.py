"""The name earlier versions gave the sweep-summary callback: primary configs copied from them still
say ``_target_: runner.sweeps.SweepSummary``. It lives in ``runner.cli.sweep_summary``."""

from runner.cli.sweep_summary import SweepSummary

__all__ = ["SweepSummary"]
