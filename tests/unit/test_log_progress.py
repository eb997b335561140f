"""Download progress where there is no terminal (a CI log): a line at the start, a line every so often with the
bytes so far, the total and the rate, and a line at the end."""

from __future__ import annotations

import logging
import time

import pytest

from preparer.cli import LogProgress
from preparer.progress import Download, EntryDownloads


def test_a_long_download_prints_a_plain_line_every_interval(caplog: pytest.LogCaptureFixture) -> None:
    progress = EntryDownloads(LogProgress(every=0.2), "io.buildpacks.group[0]", "bp", None)
    source, total = "http://example.test/bp.tgz", 4 << 20
    with caplog.at_level(logging.INFO, logger="preparer"):
        for done in range(0, total + 1, 1 << 19):  # eight pieces, 0.1 s apart: two interval lines
            progress(source, done, total)
            time.sleep(0.1)
    lines = caplog.messages
    assert lines[0] == f"Downloading {source} (4.0 MiB)"
    assert lines[-1] == f"Downloaded {source} (4.0 MiB)"
    middle = lines[1:-1]
    assert 2 <= len(middle) <= 4, lines  # every 0.2 s over about 0.8 s
    for line in middle:
        assert line.startswith(f"Downloading {source}: ") and " of 4.0 MiB (" in line and line.endswith("/s)")


def test_a_short_download_prints_only_its_start_and_end(caplog: pytest.LogCaptureFixture) -> None:
    progress = EntryDownloads(LogProgress(), "io.buildpacks.group[0]", "bp", None)
    with caplog.at_level(logging.INFO, logger="preparer"):
        for done in (0, 100, 2048):
            progress("a.tgz", done, 2048)
        progress("b.tgz", 0, 0)  # from the download cache: debug only
    assert caplog.messages == ["Downloading a.tgz (2.0 KiB)", "Downloaded a.tgz (2.0 KiB)"]


def test_reports_become_events_in_order_for_each_download() -> None:
    events: list[Download] = []
    downloads = EntryDownloads(events.append, "io.buildpacks.group[1]", "https://h/bp.tgz", "me/bp")
    for done in (0, 10, 20, 20):  # the reader's last count, then the body's end
        downloads("https://h/bp.tgz", done, 20)
    downloads("https://h/other.tgz", 0, 0)  # from a cache
    downloads("blob", 5, None)
    downloads.failed()
    assert [(e.kind, e.url, e.done) for e in events] == [
        ("started", "https://h/bp.tgz", 0),
        ("progress", "https://h/bp.tgz", 10),
        ("finished", "https://h/bp.tgz", 20),
        ("cached", "https://h/other.tgz", 0),
        ("started", "blob", 5),
        ("failed", "blob", 5),
    ]
    assert {(e.entry, e.source, e.buildpack) for e in events} == {
        ("io.buildpacks.group[1]", "https://h/bp.tgz", "me/bp")
    }
