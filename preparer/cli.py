"""The ``preparer`` command: a thin adapter from a Go-style command line to :func:`preparer.prepare`.

The only module that reads ``os.environ``, prints or exits. It follows the lifecycle's order: the version and
help flags; ``CNB_PLATFORM_API`` before any other flag (exit 11); the flags (exit 2); the inputs (exit 3); then
the phase itself, whose errors carry their exit codes.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Sequence
from typing import Any

import typer

from preparer import __version__, goflags
from preparer.api import verify_platform_api
from preparer.errors import InvalidInputsError, PreparerError
from preparer.inputs import ENV_PLATFORM_API, log_level_of, no_color, resolve_inputs
from preparer.log import configure

PROGRAM = "preparer"
app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
log = logging.getLogger("preparer")


@app.command(
    context_settings={
        "ignore_unknown_options": True,
        "allow_extra_args": True,
        "allow_interspersed_args": False,
        "help_option_names": [],
    },
    help="Apply project.toml before creator/detector runs (the CNB prepare phase).",
)
def _command(ctx: typer.Context) -> None:
    # Go's flag package decides what the arguments mean, so the raw argv travels as the context object.
    raise typer.Exit(run(ctx.obj, dict(os.environ)))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command on ``argv`` (default: ``sys.argv[1:]``); return the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    # Outside standalone mode, click returns the code of the typer.Exit raised by the command.
    code = app(args=args, prog_name=PROGRAM, standalone_mode=False, obj=args)
    return code if isinstance(code, int) else 0


def run(argv: Sequence[str], environ: dict[str, str]) -> int:
    """The command's steps, in the lifecycle's order. Returns the exit code."""
    out, err = sys.stdout, sys.stderr
    if goflags.asks_for_version_or_help(argv):
        parsed = _parse_quietly(argv)
        if parsed is None or parsed.help:
            out.write(goflags.usage(PROGRAM))
        else:
            out.write(__version__ + "\n")
        return 0
    try:
        verify_platform_api(environ.get(ENV_PLATFORM_API))
    except PreparerError as error:
        err.write(f"ERROR: {error.message}\n")
        return error.exit_code
    try:
        parsed = goflags.parse(argv)
    except goflags.FlagError as error:
        err.write(f"{error}\nUsage: {PROGRAM} [flags] [<image>] (see -h)\n")
        return 2
    color = not no_color(parsed.values, environ)
    level = log_level_of(parsed.values, environ)
    configure(level, color=color and err.isatty(), stdout=out, stderr=err)
    for warning in parsed.warnings:
        log.warning("%s", warning)
    return _prepare(parsed, environ, color and err.isatty())


def _parse_quietly(argv: Sequence[str]) -> goflags.Parsed | None:
    try:
        return goflags.parse(argv)
    except goflags.FlagError:
        return None


def _prepare(parsed: goflags.Parsed, environ: dict[str, str], tty: bool) -> int:
    from preparer.pipeline import prepare

    try:
        if len(parsed.positionals) > 1:
            raise InvalidInputsError(
                "parse arguments", f"received {len(parsed.positionals)} arguments, but expected at most 1"
            )
        inputs = resolve_inputs(parsed.values, environ)
        log.info("===> PREPARING")
        progress = TerminalProgress() if tty else LogProgress()
        try:
            prepare(inputs, progress=progress)
        finally:
            progress.close()
    except PreparerError as error:
        log.error("%s", error.message)
        return int(error.exit_code)
    except KeyboardInterrupt:
        log.error("failed to prepare: interrupted")
        return 130
    except Exception as error:  # no input may end in a traceback; it is shown at debug level only
        log.debug("unexpected error", exc_info=True)
        log.error("failed to prepare: %s: %s", type(error).__name__, error)
        return 1
    return 0


def _size(total: int | None) -> str:
    if total is None:
        return ""
    return f" ({total / (1 << 20):.1f} MiB)" if total >= 1 << 20 else f" ({total / 1024:.1f} KiB)"


class LogProgress:
    """Download progress as plain log lines: one when a download starts and one when it ends."""

    def __init__(self) -> None:
        self.started: set[str] = set()
        self.finished: set[str] = set()
        self.lock = threading.Lock()

    def __call__(self, source: str, done: int, total: int | None) -> None:
        with self.lock:
            first = source not in self.started
            last = total is not None and done >= total and source not in self.finished
            self.started.add(source)
            if last:
                self.finished.add(source)
        if first and total != 0:
            log.info("Downloading %s%s", source, _size(total))
        if last and total:
            log.info("Downloaded %s", source)

    def close(self) -> None:
        """Nothing to clean up."""


class TerminalProgress:
    """Download progress as bars on a terminal (rich, imported on the first download)."""

    def __init__(self) -> None:
        self.bar: Any = None
        self.tasks: dict[str, Any] = {}
        self.lock = threading.Lock()

    def __call__(self, source: str, done: int, total: int | None) -> None:
        with self.lock:
            if self.bar is None:
                from rich.progress import Progress

                self.bar = Progress(transient=False)
                self.bar.start()
            if source not in self.tasks:
                self.tasks[source] = self.bar.add_task(source, total=total)
            self.bar.update(self.tasks[source], completed=done, total=total)

    def close(self) -> None:
        """Stop drawing."""
        if self.bar is not None:
            self.bar.stop()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
