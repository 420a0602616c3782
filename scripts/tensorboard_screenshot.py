"""A screenshot of a TensorBoard tab as a browser draws it, for the docs and for a look by eye.

    python scripts/tensorboard_screenshot.py outputs/multirun/<day>/<sweep> docs/tensorboard_hparams.png
    python scripts/tensorboard_screenshot.py outputs scalars.png --tab scalars --size 1400x2400

Starts a real ``tensorboard`` on loopback on LOGDIR, waits until it has read the runs (for the HParams
tab, their HParams records), and has a headless chromium draw the tab. Needs ``chromium`` on PATH
(Debian: ``apt-get install chromium``).
"""

import argparse
import json
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def wait_for_sessions(url: str, timeout: float = 60) -> None:
    body = json.dumps({"experimentName": "", "startIndex": 0, "sliceSize": 10, "colParams": [],
                       "allowedStatuses": ["STATUS_UNKNOWN", "STATUS_SUCCESS", "STATUS_FAILURE",
                                           "STATUS_RUNNING"]}).encode()  # fmt: skip
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        request = urllib.request.Request(
            f"{url}/data/plugin/hparams/session_groups",
            data=body,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            if json.load(response).get("sessionGroups"):
                return
        time.sleep(0.5)
    raise SystemExit(f"tensorboard read no HParams records under {url} in {timeout:.0f} s")


def wait_for_runs(url: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"{url}/data/runs", timeout=30) as response:
            if json.load(response):
                return
        time.sleep(0.5)
    raise SystemExit(f"tensorboard read no runs under {url} in {timeout:.0f} s")


def screenshot(
    logdir: Path, picture: Path, width: int = 1400, height: int = 700, tab: str = "hparams"
) -> None:
    server = subprocess.Popen(
        [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--host", "127.0.0.1",
         "--port", "0", "--reload_interval", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        url = None
        for line in server.stderr:
            if found := re.search(r"http://127\.0\.0\.1:(\d+)/", line):
                url = f"http://127.0.0.1:{found[1]}"
                break
        if url is None:
            raise SystemExit("tensorboard did not start")
        wait_for_sessions(url) if tab == "hparams" else wait_for_runs(url)
        subprocess.run(
            ["chromium", "--headless", "--no-sandbox", "--disable-gpu", f"--window-size={width},{height}",
             "--virtual-time-budget=15000", f"--screenshot={picture.resolve()}", f"{url}/#{tab}"],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
    finally:
        server.terminate()
        server.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("logdir", type=Path)
    parser.add_argument("picture", type=Path)
    parser.add_argument("--size", default="1400x700", help="WIDTHxHEIGHT in pixels")
    parser.add_argument("--tab", default="hparams", choices=("hparams", "scalars", "timeseries"))
    arguments = parser.parse_args()
    width, height = (int(number) for number in arguments.size.split("x"))
    screenshot(arguments.logdir, arguments.picture, width, height, arguments.tab)


if __name__ == "__main__":
    main()
