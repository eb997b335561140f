"""Numbers in text from outside are read as the peer tools read them: ASCII digits only.

Python's ``str.isdigit`` takes ``'²'``, which ``int`` refuses (a check with the one and a read with the other was an
unforeseen error), and ``int`` and ``re``'s ``\\d`` take other scripts' digits (``'١٢'`` read as 12), which curl, Go,
GNU tar and registries refuse. Each place that reads such a number, with the input a user or a hostile server gives.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import pytest

from preparer import check_descriptor
from preparer._numbers import decimal
from preparer.api import APIVersion
from preparer.errors import FetchError, PreparerError
from preparer.fetch.environment import bypassed
from preparer.fetch.extract import extract_tar
from preparer.fetch.url import UrlError, parse_http_url
from preparer.goflags import parse_duration
from preparer.semver import semver_key
from tests.buildpacks import raw_header
from tests.golden import Layout
from tests.plugins.cli import Result

#: Superscript two (``isdigit`` but not ``int``), Arabic-Indic and full-width digits (``int`` reads both).
OTHER_DIGITS = ["\u00b2", "\u0661\u0662", "\uff18\uff10"]


@pytest.mark.parametrize("text", [*OTHER_DIGITS, "", "+1", "-1", " 1", "1_000", "1.0"])
def test_decimal_takes_ascii_digits_only(text: str) -> None:
    assert decimal(text) is None
    assert decimal("0") == 0 and decimal("8080") == 8080


@pytest.mark.parametrize("port", OTHER_DIGITS)
def test_a_port_of_other_digits_is_refused_as_not_a_number(port: str) -> None:
    with pytest.raises(UrlError, match="its port is not a number from 1 to 65535"):
        parse_http_url(f"https://host:{port}/bp.tgz")


@pytest.mark.parametrize("port", OTHER_DIGITS)
def test_no_proxy_reads_no_port_from_other_digits(port: str) -> None:
    assert not bypassed("host", 80, f"host:{port}")
    assert bypassed("host", 80, "host:80")


def pax_archive(size: str) -> bytes:
    """A tar whose one file's size is given by a PAX record (``<length> size=<size>\\n``, the length counting
    itself)."""
    body = f" size={size}\n".encode()
    length = len(body) + 1
    while len(str(length)) + len(body) != length:
        length = len(str(length)) + len(body)
    record = str(length).encode() + body
    pax = raw_header(b"PaxHeaders/x", len(record), b"x") + record.ljust(512, b"\0")
    return pax + raw_header(b"x", 12) + b"twelve bytes".ljust(512, b"\0") + bytes(1024)


@pytest.mark.parametrize("size", OTHER_DIGITS)
def test_a_pax_size_of_other_digits_is_refused(size: str, tmp_path: Path) -> None:
    (tmp_path / "good").mkdir()
    extract_tar(io.BytesIO(pax_archive("12")), tmp_path / "good", archive="bp.tar")
    assert (tmp_path / "good" / "x").read_bytes() == b"twelve bytes"
    (tmp_path / "bad").mkdir()
    with pytest.raises(FetchError, match=r"not a valid tar archive \(malformed PAX size\)"):
        extract_tar(io.BytesIO(pax_archive(size)), tmp_path / "bad", archive="bp.tar")


@pytest.mark.parametrize("text", ["\u0665s", "1\u0665m", "\uff15s"])
def test_a_duration_of_other_digits_is_not_a_go_duration(text: str) -> None:
    assert parse_duration(text) is None
    assert parse_duration("5s") == 5.0


@pytest.mark.parametrize("version", ["\u0661.0.0", "1.\u0662.0", "1.0.0-\u0661"])
def test_a_version_of_other_digits_is_not_semver(version: str) -> None:
    assert semver_key(version) is None


@pytest.mark.parametrize("api", ["0.\u0661\u0662", "\u0660.12"])
def test_a_platform_api_of_other_digits_is_refused(api: str) -> None:
    with pytest.raises((PreparerError, ValueError)):
        APIVersion.parse(api)


@pytest.mark.parametrize("port", OTHER_DIGITS)
def test_the_command_refuses_such_a_port_before_any_request(
    port: str, preparer: Callable[..., Result], layout: Layout
) -> None:
    uri = f"https://host:{port}/bp.tgz"
    result = preparer(project=f'[_]\nschema-version = "0.2"\n[[io.buildpacks.group]]\nuri = "{uri}"\n')
    assert result.code == 3, result.stderr
    assert "its port is not a number from 1 to 65535" in result.stderr.splitlines()[-1]
    assert "does not foresee" not in result.stderr
    assert not (layout.layers / "order.toml").exists()
    [problem] = check_descriptor(layout.app / "project.toml")
    assert "its port is not a number from 1 to 65535" in str(problem)


@pytest.mark.parametrize("value", ["\u0661\u0665", "1_0", " 5", "5 ", "nan", "inf", "-5"])
def test_a_timeout_setting_is_plain_seconds(value: str, preparer: Callable[..., Result]) -> None:
    result = preparer(env={"CNB_PREPARER_HTTP_TIMEOUT": value}, project='[_]\nschema-version = "0.2"\n')
    assert result.code == 3, result.stderr
    assert "CNB_PREPARER_HTTP_TIMEOUT must be a positive number of seconds" in result.stderr
    assert (
        preparer(env={"CNB_PREPARER_HTTP_TIMEOUT": "2.5"}, project='[_]\nschema-version = "0.2"\n').code == 0
    )


def test_a_descriptor_size_beyond_int64_is_no_size() -> None:
    from preparer.fetch.oci.buildpackage import descriptor_size

    assert descriptor_size({"size": (1 << 63) - 1}) == (1 << 63) - 1
    assert [descriptor_size({"size": s}) for s in (1 << 63, 10**100, -1, True, "12", 1.0)] == [None] * 6
