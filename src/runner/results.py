"""How a run ended, recorded beside it for summaries (kept apart from report.py, whose TensorBoard
reader is slow to import, so training does not pay for it)."""

import json
from pathlib import Path

RESULT_FILE = "result.json"


def write_result(
    run_dir: Path, status: str, wall_seconds: float, best: float | None = None, error: str = ""
) -> None:
    """``ok`` or ``failed``; a run without one is ``incomplete`` (still running, or killed)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    result = {"status": status, "wall_seconds": round(wall_seconds, 3), "best": best, "error": error}
    (run_dir / RESULT_FILE).write_text(json.dumps(result, indent=2))
