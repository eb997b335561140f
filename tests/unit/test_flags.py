"""The one table of settings: the parser, -h, the defaults the inputs use and docs/usage.md's table all agree."""

from __future__ import annotations

import re
from pathlib import Path

from preparer.flags import FLAGS
from preparer.goflags import usage
from preparer.inputs import Inputs, resolve_inputs

USAGE = Path(__file__).resolve().parents[2] / "docs" / "usage.md"


def documented_rows() -> dict[str, tuple[str, str]]:
    """docs/usage.md's settings table: ``-flag`` (or the variable) -> (environment variable, default)."""
    rows = {}
    for line in USAGE.read_text().splitlines():
        match = re.match(r"^\| (`-[a-z-]+`|\(none\)) \| (`[A-Z_]+`)? *\| (`[^`]*`)? *\|", line)
        if match:
            env = (match[2] or "").strip("`")
            rows[match[1].strip("`") if match[1] != "(none)" else env] = (env, (match[3] or "").strip("`"))
    return rows


def test_the_usage_page_lists_every_setting_the_preparer_uses_as_the_table_has_it() -> None:
    expected = {
        (f"-{f.name}" if f.name else f.env or ""): (f.env or "", f.default or "") for f in FLAGS if f.used
    }
    assert documented_rows() == expected


def test_help_shows_every_default_of_the_table() -> None:
    text = usage()
    for flag in FLAGS:
        if flag.default is not None:
            assert f'default "{flag.default}"' in text


def test_the_inputs_defaults_are_the_tables() -> None:
    from_command = resolve_inputs({}, {}, cwd=Path("/"))
    plain = Inputs.from_environ({})
    for inputs in (from_command, plain):
        assert str(inputs.app_dir) == "/workspace" and str(inputs.order_path) == "/cnb/order.toml"
        assert inputs.exec_env == "production" and inputs.http_timeout == 60.0
        assert inputs.registry_index == next(f.default for f in FLAGS if f.name == "buildpack-registry-index")
