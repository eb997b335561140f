"""A file server for the benchmarks: Python's http.server in a child process on 127.0.0.1."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Self


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class FileServer:
    """``python -m http.server`` (threaded) serving ``root``; use as a context manager."""

    def __init__(self, root: Path) -> None:
        self.root, self.port = root, free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.log = root.parent / f"access-{self.port}.log"

    def requests(self) -> int:
        """How many requests the server has answered (its access log, a line each)."""
        try:
            return sum(1 for line in self.log.read_text().splitlines() if '"GET ' in line or '"HEAD ' in line)
        except OSError:
            return 0

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}"

    def __enter__(self) -> Self:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "http.server", str(self.port), "--bind", "127.0.0.1", "--directory", str(self.root)],
            stdout=subprocess.DEVNULL, stderr=self.log.open("wb"),
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("file server did not start")

    def __exit__(self, *exc: object) -> None:
        if self.process:
            self.process.terminate()
            self.process.wait()
