"""A library caller's own SIGINT handler and the commit: a Ctrl-C that comes while the run commits is held until
the call is over, so the outputs are all there or none is, and a committed run is never mistaken for a failed one
(issue: the library in a long-lived build service, round 2).

Real signals: SIGINT sent to this process with ``os.kill`` from another thread, timed into the commit by a
logging handler on the run's own lines (said inside the commit, or once it is whole); the real http file server,
real archives, the public API only. pytest runs the tests in the main thread, the only one signals reach.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType

import pytest

from preparer import Inputs, Report, committed_report, prepare
from tests.buildpacks import make_tgz
from tests.golden import BUILDER, Layout
from tests.plugins.http_server import FileServer
from tests.projects import HEAD

ENV_AND_EXCLUDE = (
    '[io.buildpacks]\nexclude = ["*.log"]\n'
    '[[io.buildpacks.build.env]]\nname = "A"\nvalue = "1"\n'
    '[[io.buildpacks.build.env]]\nname = "B"\nvalue = "2"\n'
)


class Shutdown(Exception):
    """What a service's own SIGINT handler raises."""


def build(root: Path, uri: str) -> tuple[Layout, Inputs]:
    layout = Layout(root)
    shutil.copytree(BUILDER, layout.root / "cnb")
    layout.app.mkdir(parents=True)
    layout.layers.mkdir()
    (layout.app / "debug.log").write_text("removed by exclude\n")
    (layout.app / "main.py").write_text("kept\n")
    (layout.app / "project.toml").write_text(
        HEAD + ENV_AND_EXCLUDE + f'[[io.buildpacks.group]]\nuri = "{uri}"\n'
    )
    inputs = Inputs(
        app_dir=str(layout.app), layers_dir=str(layout.layers), platform_dir=str(layout.platform),
        buildpacks_dir=str(layout.buildpacks), order_path=str(layout.order), download_cache=None,
    )  # fmt: skip
    return layout, inputs


def outputs(layout: Layout) -> dict[str, bool]:
    """Each output of the run, and whether it is there as a committed run leaves it."""
    installed = layout.buildpacks.is_dir() and any(p.name == "svc_sig" for p in layout.buildpacks.iterdir())
    return {
        "order.toml": (layout.layers / "order.toml").is_file(),
        "env/A": (layout.platform / "env" / "A").is_file(),
        "env/B": (layout.platform / "env" / "B").is_file(),
        "buildpack": installed,
        "excluded file removed": not (layout.app / "debug.log").exists(),
    }


@pytest.fixture
def signal_on(http_server: FileServer) -> Iterator[Callable[[str], list[str]]]:
    """``signal_on(prefix)``: SIGINT is sent to this process from another thread when the run logs a line that
    starts with ``prefix``; the handler waits for that thread, so the signal is pending before the run's next
    line. Returns the lines said, in order (the one that sent the signal included)."""
    logger = logging.getLogger("preparer")
    level = logger.level
    said: list[str] = []
    handlers: list[logging.Handler] = []

    class Sender(logging.Handler):
        def __init__(self, prefix: str) -> None:
            super().__init__()
            self.prefix, self.sent = prefix, False

        def emit(self, record: logging.LogRecord) -> None:
            said.append(record.getMessage())
            if not self.sent and record.getMessage().startswith(self.prefix):
                self.sent = True
                sender = threading.Thread(target=os.kill, args=(os.getpid(), signal.SIGINT))
                sender.start()
                sender.join()

    def arm(prefix: str) -> list[str]:
        handler = Sender(prefix)
        handlers.append(handler)
        logger.addHandler(handler)
        return said

    logger.setLevel(logging.INFO)
    try:
        yield arm
    finally:
        for handler in handlers:
            logger.removeHandler(handler)
        logger.setLevel(level)


ALL = dict.fromkeys(("order.toml", "env/A", "env/B", "buildpack", "excluded file removed"), True)


@pytest.mark.parametrize(
    "line",
    [
        "Installed",  # inside the commit: the buildpack is moved into <buildpacks>, nothing is renamed yet
        "Wrote build env",  # once the commit is whole, while the run says what it wrote
    ],
)
def test_a_raising_handler_of_the_callers_gets_the_ctrl_c_once_the_run_is_committed(
    http_server: FileServer,
    tmp_path: Path,
    signal_on: Callable[[str], list[str]],
    own_handler: Callable[[Callable[[int, FrameType | None], object]], None],
    line: str,
) -> None:
    make_tgz(http_server.root / "bp.tgz", "svc/sig")
    layout, inputs = build(tmp_path / "b", http_server.url("bp.tgz"))
    seen: list[dict[str, bool]] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        seen.append(outputs(layout))  # what is on disk when the handler runs
        raise Shutdown("the service is stopping")

    own_handler(handler)
    said = signal_on(line)
    with pytest.raises(Shutdown) as raised:
        prepare(inputs)
    assert any(s.startswith(line) for s in said)  # the signal was sent where the test meant it
    assert seen == [ALL]  # called once, after everything was written: never inside the commit
    assert outputs(layout) == ALL
    report = committed_report(raised.value)
    assert isinstance(report, Report)
    assert report.written[0] == str(layout.layers / "order.toml")
    assert report.app_removed == 1
    assert [b.id for b in report.buildpacks] == ["svc/sig"]
    assert any("the run was complete" in note for note in raised.value.__notes__)
    assert said.index(next(s for s in said if s.startswith("Removed"))) > said.index(
        next(s for s in said if s.startswith(line))
    )  # the run went on to its last line after the signal came


def test_pythons_own_handler_raises_keyboard_interrupt_with_the_report(
    http_server: FileServer, tmp_path: Path, signal_on: Callable[[str], list[str]]
) -> None:
    """With Python's default SIGINT handler, a Ctrl-C during the commit is the caller's ``KeyboardInterrupt``,
    after the commit, and it tells the run was committed."""
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    make_tgz(http_server.root / "bp.tgz", "svc/sig")
    layout, inputs = build(tmp_path / "b", http_server.url("bp.tgz"))
    signal_on("Installed")
    with pytest.raises(KeyboardInterrupt) as raised:
        prepare(inputs)
    assert outputs(layout) == ALL
    assert committed_report(raised.value) is not None
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # given back


def test_a_handler_that_only_takes_note_leaves_the_run_returning_its_report(
    http_server: FileServer,
    tmp_path: Path,
    signal_on: Callable[[str], list[str]],
    own_handler: Callable[[Callable[[int, FrameType | None], object]], None],
) -> None:
    """A service whose handler sets a flag (to stop taking builds) gets the report of the run it let finish."""
    make_tgz(http_server.root / "bp.tgz", "svc/sig")
    layout, inputs = build(tmp_path / "b", http_server.url("bp.tgz"))
    seen: list[dict[str, bool]] = []
    own_handler(lambda signum, frame: seen.append(outputs(layout)))
    signal_on("Installed")
    report = prepare(inputs)
    assert seen == [ALL]
    assert outputs(layout) == ALL
    assert [b.id for b in report.buildpacks] == ["svc/sig"]


def test_a_ctrl_c_before_the_commit_is_the_callers_at_once_and_nothing_is_written(
    http_server: FileServer, tmp_path: Path, signal_on: Callable[[str], list[str]]
) -> None:
    """Only the commit holds a Ctrl-C: while the run plans, Python's handler raises where the signal lands, and the
    run leaves nothing behind."""
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    make_tgz(http_server.root / "bp.tgz", "svc/sig")
    layout, inputs = build(tmp_path / "b", http_server.url("bp.tgz"))
    said = signal_on("Project descriptor")  # the run's first line, while it plans
    with pytest.raises(KeyboardInterrupt) as raised:
        prepare(inputs)
    assert said == [said[0]]  # raised where the signal landed: nothing more was said
    assert committed_report(raised.value) is None
    assert outputs(layout) == dict.fromkeys(ALL, False)
