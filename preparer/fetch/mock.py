"""A transport that answers from memory, as httpx's ``MockTransport`` does: every request goes to a handler, none
to a socket.

For unit tests of what fetching does with answers (revalidation, retries, redirects, truncated bodies, pins), and
for services that embed the library and want to see its requests. Everything above the session is the real
transport: redirects followed hop by hop, the retry rule, the body streamed, hashed and bounded::

    def answer(request: Request) -> Answer:
        return Answer(200, {"ETag": '"1"'}, archive_bytes)

    transport = mock_transport(answer, backoff=0.01)
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from preparer.fetch.transport import Transport

if TYPE_CHECKING:
    import requests


class Request(NamedTuple):
    """A request as it would have been sent."""

    method: str
    url: str
    headers: Mapping[str, str]


class Answer(NamedTuple):
    """What the handler answers: a status, headers and a body. ``length``: the ``Content-Length`` to announce
    (the body's own by default; larger, for a body cut short)."""

    status: int
    headers: Mapping[str, str] = {}
    body: bytes = b""
    length: int | None = None


#: Answers a request, or raises an ``OSError`` (a connection refused, reset, timed out) as a socket would.
Handler = Callable[[Request], Answer]


class Script:
    """A :data:`Handler` that gives its answers in turn (the last one to every request after it) and records every
    request in :attr:`seen`: what a test or a service reads back to see which requests were made, in which order."""

    def __init__(self, *answers: Answer | OSError) -> None:
        self.answers, self.seen = list(answers), list[Request]()

    def __call__(self, request: Request) -> Answer:
        self.seen.append(request)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, OSError):
            raise answer
        return answer


def mock_transport(handler: Handler, **settings: Any) -> Transport:
    """A :class:`~preparer.fetch.transport.Transport` (``settings`` as its fields) whose every request ``handler``
    answers."""
    transport = Transport(**settings)
    transport.use_session(_session(handler))
    return transport


def _session(handler: Handler) -> requests.Session:
    import requests  # deferred (heavy), as for the real session
    import urllib3
    from requests.adapters import HTTPAdapter

    class Memory(HTTPAdapter):
        def send(self, request: requests.PreparedRequest, *args: Any, **kwargs: Any) -> requests.Response:
            try:
                answer = handler(Request(str(request.method), str(request.url), dict(request.headers)))
            except OSError as err:
                raise requests.exceptions.ConnectionError(err, request=request) from err
            length = len(answer.body) if answer.length is None else answer.length
            headers = {"Content-Length": str(length), **answer.headers}
            raw = urllib3.HTTPResponse(
                body=io.BytesIO(answer.body), headers=headers, status=answer.status, preload_content=False,
                decode_content=False, enforce_content_length=True, reason=None,
            )  # fmt: skip
            return self.build_response(request, raw)

    session = requests.Session()
    adapter = Memory(max_retries=0)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session
