"""The ``preparer`` command: a thin adapter from a Go-style command line to :func:`preparer.prepare`.

The only module that reads ``os.environ``, prints or exits. It follows the lifecycle's order: ``-h`` and
``-version``; ``CNB_PLATFORM_API`` before any flag error (exit 11); the flags (exit 2); the inputs (exit 3); then
the phase itself, whose errors carry their exit codes. Typer defines the command; the arguments themselves are
read by :mod:`preparer.goflags`, because platforms pass Go-style command lines.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

import typer

from preparer import goflags, interrupt
from preparer._version import __version__
from preparer.api import verify_platform_api
from preparer.errors import FetchErrors, InvalidInputsError, PreparerError
from preparer.exit import ExitCode
from preparer.flags import default, env_of
from preparer.inputs import resolve_inputs
from preparer.log import configure, printable
from preparer.report import write_report
from preparer.resolve import log_level_of, no_color

if TYPE_CHECKING:
    from preparer.progress import Download

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


#: Whether this process is the command's own (:func:`entry`), not a program that calls :func:`main`.
_own_process = False


@contextlib.contextmanager
def _start_up() -> Iterator[None]:
    """The run's deferred imports, in the command's own process as ``python -m preparer`` imports the command
    (:mod:`preparer.__main__`): with the cycle collector paused, and what they made frozen after, as it lives as
    long as the process (the collector ran a dozen times over those imports). In another program's process,
    nothing of its collector is touched."""
    if not _own_process:
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()


def entry() -> NoReturn:
    """The process's entry point (the ``preparer`` script, ``python -m preparer``, the lifecycle image): run the
    command, then end the process at once, its output flushed.

    Tearing the interpreter down (freeing every module and object) costs a tenth of a short run and does nothing a
    phase needs: every file the run writes is closed and its temporary directories removed before :func:`main`
    returns.
    """
    global _own_process
    _own_process = True
    with interrupt.run():  # the whole command: a signal at any point of it is seen by the phase
        interrupt.handle_signals()
        code = main()
    logging.shutdown()
    _flush_or_discard()
    os._exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command on ``argv`` (default: ``sys.argv[1:]``); return the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        # Outside standalone mode, click returns the code of the typer.Exit raised by the command.
        code = app(args=args, prog_name=PROGRAM, standalone_mode=False, obj=args)
    except (KeyboardInterrupt, typer.Abort) as error:  # a signal before the phase began
        code = _interrupted(error.__cause__ if isinstance(error, typer.Abort) else error)
    _flush_or_discard()
    return code if isinstance(code, int) else 0


def _say(stream: TextIO, text: str) -> None:
    """Write ``text``; a reader that went away is no error of the preparer's (Go ignores it too)."""
    try:
        stream.write(text)
        stream.flush()
    except OSError:
        pass


def _flush_or_discard() -> None:
    """Flush stdout and stderr; when a reader went away, send what is left to /dev/null.

    Python flushes them again at exit and would report a closed pipe with "Exception ignored" and exit 120.
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except OSError:
            try:
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, stream.fileno())
                os.close(devnull)
            except (OSError, ValueError):
                pass


def run(argv: Sequence[str], environ: Mapping[str, str]) -> int:
    """The command's steps, in the lifecycle's order. Returns the exit code.

    1. Parse the flags, Go's way (no side effects yet); ``-h`` and ``-version`` need nothing else.
    2. ``CNB_PLATFORM_API`` (exit 11), before a flag error is reported (exit 2).
    3. Resolve the inputs (exit 3), then run the phase; its errors carry their exit codes.
    """
    out, err = sys.stdout, sys.stderr
    try:
        parsed, flag_error = goflags.parse(argv), None
    except goflags.FlagError as error:
        parsed, flag_error = None, error
    if parsed is not None and parsed.help:
        _say(out, goflags.usage(PROGRAM))
        return 0
    if parsed is not None and parsed.values.get("version") is True:
        _say(out, __version__ + "\n")
        return 0
    try:
        verify_platform_api(environ.get("CNB_PLATFORM_API"))
    except PreparerError as error:
        _say(err, f"ERROR: {error.message}\n")
        return error.exit_code
    if parsed is None:
        _say(err, f"{flag_error}\nUsage: {PROGRAM} [flags] [<image>] (see -h)\n")
        return ExitCode.USAGE
    said: list[str] = []
    color = not no_color(parsed.values, environ, said.append)
    configure(log_level_of(parsed.values, environ), color=color)
    for warning in (*parsed.warnings, *said, *_unknown_settings(environ)):
        log.warning("%s", warning)
    return _prepare(parsed, environ, color)


def _unknown_settings(environ: Mapping[str, str]) -> list[str]:
    """A warning for each ``CNB_PREPARER_*`` variable that is no setting (a typo is otherwise a setting silently
    not applied), with the one meant when it is near."""
    from preparer.flags import BY_ENV

    unknown = sorted(n for n in environ if n.startswith("CNB_PREPARER_") and n not in BY_ENV)
    if not unknown:
        return []
    from preparer._near import closest  # deferred: most environments hold none

    known = sorted(name for name in BY_ENV if name.startswith("CNB_PREPARER_"))
    warnings = []
    for name in unknown:
        near = closest(name, known, most=3)
        meant = f" (did you mean {near}?)" if near else f" (the preparer's are {', '.join(known)})"
        warnings.append(f"{name} is not a setting of the preparer{meant}: it is ignored")
    return warnings


def _prepare(parsed: goflags.Parsed, environ: Mapping[str, str], color: bool) -> int:
    try:
        if len(parsed.positionals) > 1:
            raise InvalidInputsError(
                "parse arguments", f"received {len(parsed.positionals)} arguments, but expected at most 1"
            )
        inputs = resolve_inputs(parsed.values, environ)
    except PreparerError as error:
        _report_early_failure(parsed, environ, error)
        log.error("%s", error.message)
        return int(error.exit_code)
    with _start_up():  # deferred past the cheap checks: their imports cost start-up
        from preparer.fetch import workers
        from preparer.fetch.oci import memory
        from preparer.pipeline import prepare

    memory.allow()  # the allocator is this process's: the command may tune it for streaming layers
    workers.allow()  # and its extractions may fork: nothing else runs in its process

    log.info("===> PREPARING")
    log.debug(
        "Inputs: app %s, layers %s, platform %s, buildpacks %s, order %s, descriptor %s, platform namespace %s, "
        "platform config %s, download cache %s, Platform API %s, dry run %s",
        inputs.app_dir, inputs.layers_dir, inputs.platform_dir, inputs.buildpacks_dir, inputs.order_path,
        inputs.descriptor_path, inputs.platform_namespace, inputs.platform_config, inputs.download_cache,
        inputs.platform_api, inputs.dry_run,
    )  # fmt: skip
    progress: LogProgress | TerminalProgress = (
        TerminalProgress(color) if _isatty(sys.stderr) else LogProgress()
    )
    try:
        try:
            with interrupt.armed():
                prepare(inputs, progress=progress)
        finally:
            progress.close()
    except PreparerError as error:
        _report(error)
        return int(error.exit_code)
    except KeyboardInterrupt as stopped:
        return _interrupted(stopped)
    except Exception as error:  # no input may end in a traceback; it is shown at debug level only
        log.debug("unexpected error", exc_info=True)
        log.error("failed to prepare: an error the preparer does not foresee (%s)", error or "no words")
        return ExitCode.FAILED
    return ExitCode.SUCCESS


def _report(error: PreparerError) -> None:
    """``ERROR: <message>``; several errors (:class:`~preparer.errors.FetchErrors`) under one line, a line each."""
    if isinstance(error, FetchErrors):
        log.error("failed to %s:", error.action)
        for each in error.errors:
            log.error("%s", each.message, extra={"continued": True})
        return
    for each in getattr(error, "problems", ()) or (error,):  # a descriptor's problems, each on its own line
        log.error("%s", each.message)


def _interrupted(stopped: BaseException | None) -> int:
    """Say that the run was stopped (:class:`Interrupted` from the signal handlers, or a bare Ctrl-C when
    :func:`main` runs in another program's process); the exit code a shell gives for the signal."""
    if not isinstance(stopped, interrupt.Interrupted):
        stopped = interrupt.Interrupted()
    log.error("%s", stopped.message)
    if not log.handlers:  # before logging is set up
        _say(sys.stderr, f"ERROR: {stopped.message}\n")
    return stopped.exit_code


def _report_early_failure(parsed: goflags.Parsed, environ: Mapping[str, str], error: PreparerError) -> None:
    """Write the ``-prepare-report`` of a run that failed before the pipeline started (only ``[error]``)."""
    raw = parsed.values.get("prepare-report", environ.get(env_of("prepare-report")))
    if not isinstance(raw, str) or not raw:
        return

    path = Path(os.path.abspath(raw))
    if _names_an_input(path, parsed, environ):
        return
    given = {name: _given(parsed, environ, name) for name in ("layers", "platform", "app")}
    places = tuple((f"<{name}>", Path(os.path.abspath(value))) for name, value in given.items() if value)
    try:
        write_report(path, error=(int(error.exit_code), error.message), places=places)
    except PreparerError as failure:  # the input error is the one to show
        log.warning("could not write the prepare report %s: %s", path, failure)


def _names_an_input(path: Path, parsed: goflags.Parsed, environ: Mapping[str, str]) -> bool:
    """Whether the report ``path`` is a file the run would read (the descriptor, the platform file, the policy, the
    lock, the order): a report written there would destroy it."""
    app = _given(parsed, environ, "app")
    given: list[object] = [os.path.join(app, "project.toml") if app else None]
    for flag in ("project-descriptor", "platform-config", "policy", "lock", "order", "provenance"):
        given.append(parsed.values.get(flag, environ.get(env_of(flag))))
    real = os.path.realpath(path)
    return any(isinstance(p, str) and p and os.path.realpath(p) == real for p in given)


def _given(parsed: goflags.Parsed, environ: Mapping[str, str], name: str) -> str:
    """The flag ``name`` as given, else its variable, else its default (``""`` when it is not text)."""
    value = parsed.values.get(name, environ.get(env_of(name), default(name)))
    return value if isinstance(value, str) else ""


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _size(size: int | None) -> str:
    if not size:
        return ""
    return f" ({size / (1 << 20):.1f} MiB)" if size >= 1 << 20 else f" ({size / 1024:.1f} KiB)"


#: Seconds between the plain progress lines of one download, where there is no terminal (a CI log).
PROGRESS_LINE_EVERY = 10.0


def _amount(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB" if size >= 1 << 20 else f"{size / 1024:.1f} KiB"


class LogProgress:
    """Download progress as plain log lines, for a log that is no terminal: a line when a download starts, one
    every :data:`PROGRESS_LINE_EVERY` seconds while it runs (bytes so far, of the total when known, and the rate,
    as BuildKit's plain output and curl's meter show), and one when it ends. The run gives it one event at a
    time."""

    def __init__(self, every: float = PROGRESS_LINE_EVERY) -> None:
        self.every = every
        #: For each download under way: when it started and when its last line was written.
        self.running: dict[str, tuple[float, float]] = {}

    def __call__(self, event: Download) -> None:
        url, done, total, now = event.url, event.done, event.total, time.monotonic()
        if event.kind == "cached":
            log.debug("Using %s from the download cache", url)
        elif event.kind == "started":
            self.running[url] = (now, now)
            log.info("Downloading %s%s", url, _size(total))
        elif event.kind == "progress" and url in self.running:
            began, said = self.running[url]
            if now - said >= self.every:
                self.running[url] = (began, now)
                of = f" of {_amount(total)}" if total else ""
                rate = done / max(now - began, 1e-3)
                log.info("Downloading %s: %s%s (%s/s)", url, _amount(done), of, _amount(int(rate)))
        elif event.kind == "finished":
            self.running.pop(url, None)
            log.info("Downloaded %s%s", url, _size(done))
        elif event.kind == "failed":
            self.running.pop(url, None)

    def close(self) -> None:
        """Nothing to clean up."""


class TerminalProgress:
    """Download progress as bars on the terminal of stderr (rich, imported on the first download)."""

    def __init__(self, color: bool) -> None:
        self.color = color
        self.bar: Any = None
        self.tasks: dict[str, Any] = {}
        self.lock = threading.Lock()

    def __call__(self, event: Download) -> None:
        source, done, total = event.url, event.done, event.total
        if event.kind == "cached":
            return  # nothing to draw
        with self.lock:
            if self.bar is None:
                # Deferred: rich is heavy, and only a terminal that sees a download needs it.
                from rich.console import Console
                from rich.progress import Progress

                console = Console(stderr=True, no_color=not self.color)
                # Log lines written meanwhile go above the bars; stdout only when it is the same terminal.
                self.bar = Progress(
                    console=console, redirect_stdout=_isatty(sys.stdout), redirect_stderr=True
                )
                self.bar.start()
            if source not in self.tasks:
                # The label is the user's uri: never rich markup, never a control character.
                from rich.markup import escape  # deferred, as rich above

                self.tasks[source] = self.bar.add_task(escape(printable(source)), total=total)
            self.bar.update(self.tasks[source], completed=done, total=total)

    def close(self) -> None:
        """Stop drawing."""
        with self.lock:
            if self.bar is not None:
                self.bar.stop()
                self.bar = None


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
