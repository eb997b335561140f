"""Every wait of a run obeys its cancel handle and its deadline (issue: the library in a long-lived build service,
round 2): a service that cancels a build, or gave it a deadline, gets its thread back at once.

Real components: a credential helper is a real program (a shell script that hangs, with a child of its own), asked
by a real run against the suite's docker-registry that requires credentials; a proxy and a token endpoint are
servers on 127.0.0.1 that accept a connection and never answer; the download cache's lock is held by another
process; a name server that never answers is a UDP socket, named in a resolv.conf that the run sees through a
mount namespace of its own (the machine's resolver is not changed).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from preparer import Cancel, Cancelled, Inputs, prepare
from tests.buildpacks import make_tgz
from tests.golden import BUILDER, Layout
from tests.plugins.http_server import FileServer, Stalling, stalling
from tests.plugins.registry import Registry
from tests.projects import HEAD


def hanging_helper(tmp_path: Path, registry: Registry) -> tuple[Inputs, Path]:
    """A build whose image needs credentials from a helper that never answers; where the helper's child writes
    its process id."""
    import shutil

    layout = Layout(tmp_path / "build")
    shutil.copytree(BUILDER / "buildpacks", layout.buildpacks)
    layout.app.mkdir(parents=True)
    layout.layers.mkdir()
    (layout.app / "project.toml").write_text(
        HEAD + f'[[io.buildpacks.group]]\nuri = "docker://{registry.host}/private/never:1"\n'
    )
    bin_dir, config = tmp_path / "bin", tmp_path / "docker"
    bin_dir.mkdir()
    config.mkdir()
    child = tmp_path / "child.pid"
    helper = bin_dir / "docker-credential-hang"
    helper.write_text(f"#!/bin/sh\nsleep 60 &\necho $! > {child}\nwait\n")
    helper.chmod(0o755)
    (config / "config.json").write_text(json.dumps({"credHelpers": {registry.host: "hang"}}))
    inputs = Inputs(
        app_dir=str(layout.app), layers_dir=str(layout.layers), platform_dir=str(layout.platform),
        buildpacks_dir=str(layout.buildpacks), order_path=str(layout.order), download_cache=None,
        environ={"DOCKER_CONFIG": str(config), "PATH": f"{bin_dir}:{os.environ['PATH']}"},
    )  # fmt: skip
    return inputs, child


def alive(pid_file: Path) -> bool:
    pid = int(pid_file.read_text())
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def wait_for(path: Path, seconds: float = 10) -> None:
    ends = time.monotonic() + seconds
    while not (path.exists() and path.read_text().strip()) and time.monotonic() < ends:
        time.sleep(0.01)
    assert path.exists(), "the credential helper never ran"


def test_a_cancel_stops_a_credential_helper_and_its_children_at_once(
    auth_registry: Registry, tmp_path: Path
) -> None:
    inputs, child = hanging_helper(tmp_path, auth_registry)
    handle = Cancel()
    outcome: list[BaseException] = []
    stopped_at: list[float] = []

    def build() -> None:
        try:
            prepare(inputs, cancel=handle)
        except BaseException as err:  # noqa: BLE001 - handed to the test's thread
            outcome.append(err)
        stopped_at.append(time.monotonic())

    thread = threading.Thread(target=build)
    thread.start()
    wait_for(child)
    cancelled_at = time.monotonic()
    handle.set()
    thread.join(10)
    assert isinstance(outcome[0], Cancelled), outcome
    assert stopped_at[0] - cancelled_at < 0.5, (
        stopped_at[0] - cancelled_at
    )  # 100 ms measured; a loaded machine
    assert not alive(child)  # the helper's own child went with it


def test_a_deadline_stops_a_credential_helper(auth_registry: Registry, tmp_path: Path) -> None:
    inputs, child = hanging_helper(tmp_path, auth_registry)
    began = time.monotonic()
    with pytest.raises(Cancelled) as stopped:
        prepare(inputs, deadline=1)
    took = time.monotonic() - began
    assert (stopped.value.message, stopped.value.exit_code) == (
        "failed to prepare: the run's deadline passed (1 s)",
        1,
    )
    assert took < 1.5, took  # the helper had 30 s of its own
    wait_for(child)
    assert not alive(child)


# Connections, name lookups, cache locks and token requests: each stops within a tenth of a second of the run's
# cancel or deadline. The bound asserted is half a second, for a loaded machine; what was measured is said beside.


def http_build(
    root: Path, uri: str, environ: dict[str, str] | None = None, cache: Path | None = None
) -> Inputs:
    """A build of one entry, ``uri``."""
    import shutil

    layout = Layout(root)
    shutil.copytree(BUILDER / "buildpacks", layout.buildpacks)
    layout.app.mkdir(parents=True)
    layout.layers.mkdir()
    (layout.app / "project.toml").write_text(HEAD + f'[[io.buildpacks.group]]\nuri = "{uri}"\n')
    return Inputs(
        app_dir=str(layout.app), layers_dir=str(layout.layers), platform_dir=str(layout.platform),
        buildpacks_dir=str(layout.buildpacks), order_path=str(layout.order),
        download_cache=None if cache is None else str(cache), environ=environ or {},
    )  # fmt: skip


def cancelled_when(inputs: Inputs, waiting: Callable[[], bool]) -> tuple[BaseException, float, Path]:
    """Run ``inputs`` in a thread, cancel it once ``waiting()`` says the run is in the wait under test, and return
    what it raised, the seconds between the cancel and its return, and its layers directory."""
    handle = Cancel()
    outcome: list[BaseException] = []
    stopped_at: list[float] = []

    def build() -> None:
        try:
            prepare(inputs, cancel=handle)
        except BaseException as err:  # noqa: BLE001 - handed to the test's thread
            outcome.append(err)
        stopped_at.append(time.monotonic())

    thread = threading.Thread(target=build)
    thread.start()
    ends = time.monotonic() + 10
    while not waiting() and time.monotonic() < ends and thread.is_alive():
        time.sleep(0.01)
    assert waiting(), "the run never reached the wait"
    time.sleep(0.2)  # well inside it
    cancelled_at = time.monotonic()
    handle.set()
    thread.join(10)
    assert outcome, "the run did not stop"
    return outcome[0], stopped_at[0] - cancelled_at, inputs.layers_dir


def test_a_cancel_stops_a_proxy_that_never_answers_connect(tmp_path: Path) -> None:
    with stalling(Stalling(mode="silent")) as proxy:
        inputs = http_build(
            tmp_path, "https://buildpacks.example/bp.tgz", {"https_proxy": f"http://{proxy.host}"}
        )
        error, took, layers = cancelled_when(inputs, lambda: bool(proxy.paths))
    assert proxy.paths == [
        "buildpacks.example:443"
    ]  # the CONNECT line's target: the run waited on the tunnel
    assert isinstance(error, Cancelled), error
    assert (error.message, error.exit_code) == ("failed to prepare: cancelled", 130)
    assert took < 0.5, took  # 1 ms measured
    assert list(layers.iterdir()) == []


def test_a_deadline_stops_a_proxy_that_never_answers_connect(tmp_path: Path) -> None:
    with stalling(Stalling(mode="silent")) as proxy:
        inputs = http_build(
            tmp_path, "https://buildpacks.example/bp.tgz", {"https_proxy": f"http://{proxy.host}"}
        )
        began = time.monotonic()
        with pytest.raises(Cancelled) as stopped:
            prepare(inputs, deadline=1)
        took = time.monotonic() - began
    assert proxy.paths == ["buildpacks.example:443"]
    assert stopped.value.message == "failed to prepare: the run's deadline passed (1 s)"
    assert 1 <= took < 1.5, took  # the connect timeout is 10 s, the read timeout 60 s


def test_a_cancel_stops_a_token_request_that_is_never_answered(tmp_path: Path) -> None:
    """The registry asks for a bearer token from an endpoint that accepts the connection and says nothing."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    with stalling(Stalling(mode="silent")) as tokens:

        class Challenging(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                self.send_response(401)
                self.send_header("WWW-Authenticate", f'Bearer realm="http://{tokens.host}/token",service="r"')
                self.send_header("Content-Length", "0")
                self.end_headers()

        registry = ThreadingHTTPServer(("127.0.0.1", 0), Challenging)
        threading.Thread(target=registry.serve_forever, daemon=True).start()
        try:
            inputs = http_build(tmp_path, f"docker://127.0.0.1:{registry.server_address[1]}/team/bp:1")
            error, took, layers = cancelled_when(inputs, lambda: bool(tokens.paths))
        finally:
            registry.shutdown()
            registry.server_close()
    assert tokens.paths[0].startswith("/token?"), tokens.paths
    assert isinstance(error, Cancelled), error
    assert took < 0.5, took  # 1 ms measured
    assert list(layers.iterdir()) == []


def test_a_cancel_stops_a_wait_for_the_cache_lock_another_process_holds(
    http_server: FileServer, tmp_path: Path
) -> None:
    import subprocess
    import sys

    from preparer.fetch.cache import DownloadCache

    make_tgz(http_server.root / "locked.tgz", "example/locked")
    url = http_server.url("locked.tgz")
    cache = tmp_path / "cache"
    lock = DownloadCache.open(cache).lock_name("http:" + url)
    # Another preparer holding the lock (the object kept: filelock lets go of a lock it collects).
    hold = "import filelock, sys, time\nheld = filelock.FileLock(sys.argv[1], mode=0o600)\nheld.acquire()\n"
    hold += "print('held', flush=True)\ntime.sleep(60)\n"
    holder = subprocess.Popen([sys.executable, "-c", hold, lock], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        inputs = http_build(tmp_path / "a", url, cache=cache)
        error, took, layers = cancelled_when(inputs, lambda: True)
        assert isinstance(error, Cancelled), error
        assert took < 0.5, took  # 20 ms measured (the lock is tried every 20 ms)
        assert list(layers.iterdir()) == []
        assert http_server.seen("locked.tgz") == []  # it waited for the lock: nothing was asked

        began = time.monotonic()
        with pytest.raises(Cancelled) as stopped:
            prepare(http_build(tmp_path / "b", url, cache=cache), deadline=1)
        assert stopped.value.message == "failed to prepare: the run's deadline passed (1 s)"
        assert 1 <= time.monotonic() - began < 1.5  # the lock is waited for up to 120 s
    finally:
        holder.kill()
        holder.wait()


#: Run in a namespace of its own (:func:`test_a_cancel_stops_a_name_lookup_that_is_never_answered`): a name server
#: on 127.0.0.1:53 that reads every query and answers none, and a run whose entry's host must be looked up.
NAME_LOOKUP = """
import json, socket, sys, threading, time
from preparer import Cancel, Inputs, prepare

server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
server.bind(("127.0.0.1", 53))
queries = []

def listen():
    while True:
        queries.append(server.recvfrom(512)[0])

threading.Thread(target=listen, daemon=True).start()
inputs = Inputs(**json.loads(sys.argv[1]))
handle, outcome = Cancel(), []

def build():
    try:
        prepare(inputs, cancel=handle)
    except BaseException as err:
        outcome.append(f"{type(err).__name__}: {err}")

run = threading.Thread(target=build)
run.start()
ends = time.monotonic() + 10
while not queries and time.monotonic() < ends:
    time.sleep(0.01)
time.sleep(0.2)
cancelled = time.monotonic()
handle.set()
run.join(10)
took = time.monotonic() - cancelled

def lookups():
    return [t.name for t in threading.enumerate() if t.name == "preparer-resolve"]

left = lookups()
while lookups() and time.monotonic() < cancelled + 10:
    time.sleep(0.05)
print(json.dumps({"queries": len(queries), "outcome": outcome, "took": took, "left": left,
                  "gone_after": time.monotonic() - cancelled, "still": lookups()}))
"""


def test_a_cancel_stops_a_name_lookup_that_is_never_answered(tmp_path: Path) -> None:
    """``getaddrinfo`` cannot be interrupted: the run stops waiting for it, and the thread it ran in ends when the
    resolver gives up (here after 1 s: ``options timeout:1 attempts:1``). The machine's resolver cannot be pointed
    elsewhere from here, so the run is in a user, mount and network namespace of its own, where its
    ``/etc/resolv.conf`` names the silent server."""
    import shutil
    import subprocess
    import sys

    unshare = shutil.which("unshare")
    tried = (
        None
        if unshare is None
        else subprocess.run([unshare, "-rmn", "true"], check=False, capture_output=True)
    )
    if unshare is None or tried is None or tried.returncode != 0:
        pytest.skip("user namespaces are not available here: a resolver cannot be given to the run")
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
    inputs = http_build(tmp_path / "build", "https://buildpacks.example/bp.tgz")
    fields: dict[str, str | None] = {
        name: str(getattr(inputs, name))
        for name in ("app_dir", "layers_dir", "platform_dir", "buildpacks_dir", "order_path")
    }
    fields["download_cache"] = None
    script = 'ip link set lo up && mount --bind "$0" /etc/resolv.conf && exec "$@"'
    done = subprocess.run(
        [unshare, "-rmn", "sh", "-c", script, str(resolv), sys.executable, "-c", NAME_LOOKUP, json.dumps(fields)],
        check=False, capture_output=True, text=True, timeout=60, env=os.environ,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["queries"] >= 1  # the run asked the silent server
    assert seen["outcome"] == ["Cancelled: failed to prepare: cancelled"]
    assert seen["took"] < 0.5, seen  # 12 ms measured (a lookup is watched every 20 ms)
    assert seen["left"] == ["preparer-resolve"]  # the lookup left behind, in its own thread...
    assert seen["still"] == [] and seen["gone_after"] < 3, seen  # ...ends when the resolver gives up
    assert list(inputs.layers_dir.iterdir()) == []


def test_a_cancel_stops_a_retry_s_backoff_at_once(http_server: FileServer, tmp_path: Path) -> None:
    """A server that answers 500 sends the run into its backoff (30 s here) before the next attempt."""
    import dataclasses

    from preparer.fetch.transport import Transport

    make_tgz(http_server.root / "flaky.tgz", "example/flaky")
    http_server.fail("flaky.tgz", "500", "500", "500", "500")
    inputs = http_build(tmp_path, http_server.url("flaky.tgz"))
    inputs = dataclasses.replace(inputs, transport=Transport(backoff=30.0))
    error, took, layers = cancelled_when(
        inputs, lambda: any(s == 500 for s, _ in http_server.seen("flaky.tgz"))
    )
    assert isinstance(error, Cancelled), error
    assert took < 0.5, took  # 11 ms measured
    assert [s for s, _ in http_server.seen("flaky.tgz")] == [500]  # no attempt after the cancel
    assert list(layers.iterdir()) == []
