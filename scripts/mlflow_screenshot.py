"""A screenshot of the MLflow UI's runs table for a sweep run with ``logger=[tensorboard,mlflow]``, as a
browser draws it, for the docs and for a look by eye.

    python -m runner train -m optimizer.lr=0.01,0.001 seed=0,1 trainer.max_epochs=3 \
        'logger=[tensorboard,mlflow]'
    python scripts/mlflow_screenshot.py outputs/multirun/<day>/<sweep> docs/mlflow_sweep.png

Starts a real ``mlflow server`` on loopback on the sweep's store (``mlflow.db`` in its directory), and
has a headless chromium draw the experiment's runs: the sweep's parent run expanded, its jobs nested
under it, with the swept settings and the best value as columns. The table's layout is the UI's own
saved state (its localStorage: expanded rows, chosen columns), set before the page is drawn, through
Chrome's DevTools protocol on a pipe (``--remote-debugging-pipe``). Needs ``chromium`` on PATH (Debian:
``apt-get install chromium``).
"""

import argparse
import base64
import io
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for(url: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=5):
                return
        except OSError:
            time.sleep(0.5)
    raise SystemExit(f"mlflow server did not answer at {url} in {timeout:.0f} s")


class Browser:
    """Headless chromium driven over ``--remote-debugging-pipe``: JSON messages ended by NUL, on the
    child's file descriptors 3 (commands) and 4 (replies)."""

    def __init__(self, width: int, height: int) -> None:
        commands_in, self._commands = os.pipe()
        self._replies, replies_out = os.pipe()
        flags = f"--headless --no-sandbox --disable-gpu --hide-scrollbars --window-size={width},{height}"
        self.process = subprocess.Popen(
            ["sh", "-c", f"exec chromium {flags} --remote-debugging-pipe 3<&{commands_in} 4>&{replies_out}"],
            pass_fds=(commands_in, replies_out), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        os.close(commands_in)
        os.close(replies_out)
        self._pending, self._id, self._session = b"", 0, None
        self.width, self.height = width, height

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self._id += 1
        message: dict[str, Any] = {"id": self._id, "method": method, "params": params}
        if self._session is not None and not method.startswith("Target."):
            message["sessionId"] = self._session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        while True:
            while b"\0" not in self._pending:
                chunk = os.read(self._replies, 1 << 20)
                if not chunk:
                    raise SystemExit("chromium closed its pipe")
                self._pending += chunk
            raw, self._pending = self._pending.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise SystemExit(f"chromium: {method}: {reply['error']}")
                return reply["result"]

    def open(self, url: str) -> None:
        target = self.call("Target.createTarget", url=url)["targetId"]
        self._session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.call("Emulation.setDeviceMetricsOverride", width=self.width, height=self.height,
                  deviceScaleFactor=1, mobile=False)  # fmt: skip

    def run(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result["result"].get("value")

    def wait_for_text(self, text: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not self.run(f"document.body && document.body.innerText.includes({json.dumps(text)})"):
            if time.monotonic() > deadline:
                raise SystemExit(f"the page never showed {text!r}")
            time.sleep(0.5)

    def screenshot(self, picture: Path) -> None:
        """A 256-colour PNG: a third of the size of chromium's, for a page of flat colours and text."""
        from PIL import Image

        drawn = Image.open(
            io.BytesIO(base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"]))
        )
        drawn.convert("RGB").quantize(256).save(picture, optimize=True)

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


def table_state(parent_run_id: str, columns: list[str]) -> dict[str, Any]:
    """The runs table's saved state, as the MLflow UI (3.x) keeps it: the parent expanded, the columns."""
    return {
        "selectedColumns": columns,
        "runsExpanded": {parent_run_id: True},
        "orderByKey": "attributes.start_time",
        "orderByAsc": True,
        "startTime": "ALL",
        "lifecycleFilter": "Active",
        "searchFilter": "",
    }


def screenshot(sweep_dir: Path, picture: Path, width: int, height: int, columns: list[str]) -> None:
    recorded = json.loads((sweep_dir / "mlflow_sweep.json").read_text())
    experiment, parent = recorded["experiment_id"], recorded["run_id"]
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
         "--backend-store-uri", recorded["tracking_uri"], "--workers", "1"],
        cwd=sweep_dir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    browser = None
    try:
        wait_for(url)
        browser = Browser(width, height)
        page = f"{url}/#/experiments/{experiment}/runs"
        browser.open(page)
        browser.wait_for_text(sweep_dir.name)
        storage = {
            f'MLflowLocalStorage-1.1-ExperimentPage-["{experiment}"]-ReactComponentState': table_state(
                parent, columns
            ),
            "mlflow.assistant.fab.autoOpenedOnFirstLoad_v1": True,  # the assistant's panel stays shut
            "mlflow.assistant.panelOpen_v1": False,
        }
        for key, value in storage.items():
            browser.run(f"localStorage.setItem({json.dumps(key)}, {json.dumps(json.dumps(value))})")
        browser.run("location.reload()")
        time.sleep(2)
        browser.wait_for_text(sweep_dir.name)
        browser.wait_for_text("000_")
        time.sleep(3)  # the charts' and cells' last paint
        browser.screenshot(picture)
    finally:
        if browser is not None:
            browser.close()
        server.terminate()
        server.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dir", type=Path)
    parser.add_argument("picture", type=Path)
    parser.add_argument("--size", default="1400x460", help="WIDTHxHEIGHT in pixels")
    parser.add_argument(
        "--columns",
        default="params.`optimizer.lr`,params.`seed`,metrics.`val/loss_best`,metrics.`val/acc`",
        help="the table's columns, as the MLflow UI names them",
    )
    arguments = parser.parse_args()
    width, height = (int(number) for number in arguments.size.split("x"))
    screenshot(arguments.sweep_dir, arguments.picture, width, height, arguments.columns.split(","))
    print(arguments.picture)


if __name__ == "__main__":
    main()
