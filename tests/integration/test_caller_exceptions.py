"""A caller's own code that raises inside a run before its commit (a logging handler on the ``preparer`` logger, a
SIGINT handler installed with ``signal.signal``): the run leaves as the caller's own exception, never as the
package's ``UnexpectedError``, with everything it opened closed and nothing written (issue: the library in a
long-lived build service, round 2).

Real signals sent to this process with ``os.kill`` from another thread, real logging handlers, the real http file
server and real archives, the public API only. pytest runs the tests in the main thread, the only one signals reach.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType

import pytest

from preparer import Inputs, UnexpectedError, committed_report, prepare
from tests.buildpacks import make_tgz
from tests.golden import BUILDER, Layout
from tests.integration.test_caller_sigint import Shutdown
from tests.plugins.http_server import FileServer
from tests.projects import HEAD


class SinkGone(Exception):
    """What a service's own logging handler raises."""


def build(root: Path, *uris: str) -> tuple[Layout, Inputs]:
    layout = Layout(root)
    shutil.copytree(BUILDER, layout.root / "cnb")
    layout.app.mkdir(parents=True)
    layout.layers.mkdir()
    (layout.app / "debug.log").write_text("removed by exclude\n")
    (layout.app / "main.py").write_text("kept\n")
    groups = "".join(f'[[io.buildpacks.group]]\nuri = "{uri}"\n' for uri in uris)
    (layout.app / "project.toml").write_text(
        HEAD
        + '[io.buildpacks]\nexclude = ["*.log"]\n[[io.buildpacks.build.env]]\nname = "A"\nvalue = "1"\n'
        + groups
    )
    inputs = Inputs(
        app_dir=str(layout.app), layers_dir=str(layout.layers), platform_dir=str(layout.platform),
        buildpacks_dir=str(layout.buildpacks), order_path=str(layout.order), download_cache=None,
        prepare_report=str(layout.root / "report.toml"),
    )  # fmt: skip
    return layout, inputs


def untouched(layout: Layout) -> None:
    """Nothing of the run is left: no output, no staging directory, the app as it was, no thread of the run."""
    assert not (layout.layers / "order.toml").exists()
    assert not (layout.platform / "env").exists()
    assert (layout.app / "debug.log").is_file()
    assert not (layout.root / "report.toml").exists()
    builder = {p.name for p in (BUILDER / "buildpacks").iterdir()}
    left = sorted(p.name for p in layout.buildpacks.iterdir() if p.name not in builder)
    assert left == [], left  # neither a buildpack nor a staging directory
    ends = time.monotonic() + 2
    while any(t.name.startswith(("fetch", "revalidate", "layer")) for t in threading.enumerate()):
        assert time.monotonic() < ends, [t.name for t in threading.enumerate()]
        time.sleep(0.02)


@pytest.fixture
def raising_on() -> Iterator[Callable[[str], list[str]]]:
    """``raising_on(prefix)``: a handler on the ``preparer`` logger that raises :class:`SinkGone` on the first line
    starting with ``prefix``. Returns the lines it was given."""
    logger = logging.getLogger("preparer")
    level, said, handlers = logger.level, [], []

    class Failing(logging.Handler):
        def __init__(self, prefix: str) -> None:
            super().__init__()
            self.prefix = prefix

        def emit(self, record: logging.LogRecord) -> None:
            said.append(record.getMessage())
            if record.getMessage().startswith(self.prefix):
                raise SinkGone(f"the log sink is gone ({self.prefix})")

    def arm(prefix: str) -> list[str]:
        handler = Failing(prefix)
        handlers.append(handler)
        logger.addHandler(handler)
        return said

    logger.setLevel(logging.DEBUG)
    try:
        yield arm
    finally:
        for handler in handlers:
            logger.removeHandler(handler)
        logger.setLevel(level)


def test_a_logging_handler_that_raises_while_the_run_plans_is_the_callers_exception(
    http_server: FileServer, tmp_path: Path, raising_on: Callable[[str], list[str]]
) -> None:
    make_tgz(http_server.root / "bp.tgz", "svc/logged")
    layout, inputs = build(tmp_path / "b", http_server.url("bp.tgz"))
    said = raising_on("Project descriptor")
    with pytest.raises(SinkGone, match="the log sink is gone"):
        prepare(inputs)
    assert said[-1].startswith("Project descriptor")  # raised where it was said: the run went no further
    assert http_server.seen("bp.tgz") == []
    untouched(layout)


def test_a_logging_handler_that_raises_in_a_fetch_thread_is_the_callers_exception(
    http_server: FileServer, tmp_path: Path, raising_on: Callable[[str], list[str]]
) -> None:
    """The line is a fetch thread's (a retry's warning, while another entry downloads): the run stops as a whole."""
    make_tgz(http_server.root / "a.tgz", "svc/a")
    make_tgz(http_server.root / "b.tgz", "svc/b", payload=os.urandom(2000))
    http_server.fail("a.tgz", "500")
    http_server.fail("b.tgz", "trickle")
    layout, inputs = build(tmp_path / "b", http_server.url("a.tgz"), http_server.url("b.tgz"))
    said = raising_on("download ")
    started = time.monotonic()
    with pytest.raises(SinkGone) as raised:
        prepare(inputs)
    assert time.monotonic() - started < 10  # the trickling download was called off, not waited for
    assert not isinstance(raised.value, UnexpectedError)
    assert any("trying again" in line for line in said)
    untouched(layout)


def test_a_sigint_handler_that_raises_while_the_run_plans_is_the_callers_exception(
    http_server: FileServer,
    tmp_path: Path,
    raising_on: Callable[[str], list[str]],
    own_handler: Callable[[Callable[[int, FrameType | None], object]], None],
) -> None:
    make_tgz(http_server.root / "bp.tgz", "svc/sig")
    layout, inputs = build(tmp_path / "b", http_server.url("bp.tgz"))
    handled = []

    def handler(signum: int, frame: FrameType | None) -> None:
        handled.append(signum)
        raise Shutdown("the service is stopping")

    own_handler(handler)
    logger = logging.getLogger("preparer")

    class Sender(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage().startswith("Project descriptor") and not handled:
                sender = threading.Thread(target=os.kill, args=(os.getpid(), signal.SIGINT))
                sender.start()
                sender.join()

    sender = Sender()
    logger.addHandler(sender)
    try:
        with pytest.raises(Shutdown) as raised:
            prepare(inputs)
    finally:
        logger.removeHandler(sender)
    assert handled == [signal.SIGINT]
    assert committed_report(raised.value) is None  # the run failed: nothing changed
    assert signal.getsignal(signal.SIGINT) is handler  # given back as it was
    untouched(layout)


def test_a_sigint_handler_that_raises_during_the_download_is_the_callers_exception(
    http_server: FileServer,
    tmp_path: Path,
    own_handler: Callable[[Callable[[int, FrameType | None], object]], None],
) -> None:
    """The signal comes while both archives are being served (one byte every half second): the handler's exception
    leaves the run at once, its downloads called off and its staging removed."""
    for name in ("a", "b"):
        make_tgz(http_server.root / f"{name}.tgz", f"svc/{name}", payload=os.urandom(2000))
        http_server.fail(f"{name}.tgz", "trickle")
    layout, inputs = build(tmp_path / "b", http_server.url("a.tgz"), http_server.url("b.tgz"))

    def handler(signum: int, frame: FrameType | None) -> None:
        raise Shutdown("the service is stopping")

    own_handler(handler)

    def send_when_served() -> None:
        ends = time.monotonic() + 10
        while http_server.in_flight < 2 and time.monotonic() < ends:
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGINT)

    sender = threading.Thread(target=send_when_served)
    sender.start()
    started = time.monotonic()
    try:
        with pytest.raises(Shutdown):
            prepare(inputs)
    finally:
        sender.join()
    assert http_server.most_in_flight >= 2  # the signal came mid-download, as meant
    assert time.monotonic() - started < 5
    assert signal.getsignal(signal.SIGINT) is handler
    untouched(layout)
