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


#: Python's http.server (threaded), each request first waiting the seconds its latency file says (an origin far
#: away); run as ``python -c SCRIPT PORT ROOT LATENCY_FILE``.
_FAR_SERVER = """
import functools, http.server, sys, time
port, root, latency = int(sys.argv[1]), sys.argv[2], sys.argv[3]

class Handler(http.server.SimpleHTTPRequestHandler):
    def do_GET(self):
        with open(latency) as f:
            time.sleep(float(f.read() or 0))
        super().do_GET()

http.server.ThreadingHTTPServer(("127.0.0.1", port), functools.partial(Handler, directory=root)).serve_forever()
"""


class FileServer:
    """``python -m http.server`` (threaded) serving ``root``; use as a context manager. With ``far``, each request
    waits :attr:`latency` seconds before it is answered (0 at first), as from an origin far away."""

    def __init__(self, root: Path, far: bool = False) -> None:
        self.root, self.port = root, free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.log = root.parent / f"access-{self.port}.log"
        self.latency_file = root.parent / f"latency-{self.port}" if far else None
        if self.latency_file is not None:
            self.latency_file.write_text("0")

    @property
    def latency(self) -> float:
        return float(self.latency_file.read_text()) if self.latency_file is not None else 0.0

    @latency.setter
    def latency(self, seconds: float) -> None:
        assert self.latency_file is not None, "a FileServer(far=True) has a latency"
        self.latency_file.write_text(str(seconds))

    def requests(self) -> int:
        """How many requests the server has answered (its access log, a line each)."""
        try:
            return sum(1 for line in self.log.read_text().splitlines() if '"GET ' in line or '"HEAD ' in line)
        except OSError:
            return 0

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}"

    def __enter__(self) -> Self:
        serving = (
            [sys.executable, "-c", _FAR_SERVER, str(self.port), str(self.root), str(self.latency_file)]
            if self.latency_file is not None
            else [sys.executable, "-m", "http.server", str(self.port), "--bind", "127.0.0.1", "--directory",
                  str(self.root)]
        )  # fmt: skip
        self.process = subprocess.Popen(serving, stdout=subprocess.DEVNULL, stderr=self.log.open("wb"))
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
