"""``[[image.signed-by.identities]]``: the keyless signers a rule trusts, read from the policy and matched as cosign,
sigstore-go and policy-controller match them.

An identity is an issuer and a subject (docs/policy.md), each given exactly (``issuer``, ``subject``) or as a
regular expression (``issuer-regexp``, ``subject-regexp``). A regexp is Go's (``regexp`` package: RE2 syntax), as
the tools that sign and verify keyless signatures read it: what they accept is accepted and means the same
(``\\z``, ``(?P<name>...)``, ``(?<name>...)``, ``\\pL``, ``\\p{Greek}``, ``[[:alpha:]]``, ``(?i)``, ``\\Q...\\E``;
no backreferences or lookaround, which Go refuses too). It is matched by RE2 itself (``google-re2``, Google's
binding of the C++ library Go's package was written from), so in time linear in the value whatever the pattern:
a pattern that backtracks in Python's ``re`` (``^([a-z0-9]+[._-]?)+@corp\\.example$``) costs microseconds
(docs/decisions.md, "Identity patterns in RE2").

One thing differs from those tools, on purpose: a regexp must match the whole value (cosign's match is
unanchored). A pattern written for cosign that relied on a partial match matches nothing more here, and the refusal
says that it matched only part (:meth:`Identity.partial`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from preparer._record import field, record

#: RE2's memory budget for one compiled pattern (its own default): a pattern whose program would be larger is
#: refused when the policy is read. Compiling costs at most about a quarter of a second at this budget.
MAX_PROGRAM_BYTES = 8 << 20

#: The keys of an identity table.
KEYS = ("issuer", "issuer-regexp", "subject", "subject-regexp")

#: Keys other tools write for the same thing: cosign's flags (``cosign verify --certificate-identity ...``),
#: policy-controller's ``keyless.identities`` (``subjectRegExp``), sigstore-python's options.
SYNONYMS = {
    "certificate-identity": "subject",
    "certificate-identity-regexp": "subject-regexp",
    "certificate-oidc-issuer": "issuer",
    "certificate-oidc-issuer-regexp": "issuer-regexp",
    "cert-identity": "subject",
    "cert-oidc-issuer": "issuer",
    "identity": "subject",
    "identity-regexp": "subject-regexp",
    "oidc-issuer": "issuer",
    "oidc-issuer-regexp": "issuer-regexp",
    "san": "subject",
    "san-regexp": "subject-regexp",
}


class PatternProblem(ValueError):
    """Why a regexp cannot be used, in RE2's words (``missing ): (abc``)."""


class Pattern:
    """A regexp of an identity, compiled once (when the policy is read) and matched in linear time."""

    __slots__ = ("compiled", "text")

    def __init__(self, text: str) -> None:
        """Compile ``text``.

        :raises PatternProblem: it is not a regexp Go's ``regexp`` package compiles, or too large for RE2.
        """
        import re2  # deferred: only policies with identity regexps compile one

        self.text = text
        escape = _byte_escape(text)
        if escape is not None:
            raise PatternProblem(f"invalid escape sequence: {escape} (Go's regexp has no {escape})")
        options = re2.Options()
        options.log_errors = False  # the library never prints: the error is the problem's
        options.max_mem = MAX_PROGRAM_BYTES
        try:
            self.compiled: Any = re2.compile(text, options)
        except re2.error as err:
            raise PatternProblem(_words(err)) from None

    def whole(self, value: str) -> bool:
        """Whether the pattern matches all of ``value`` (as the policy requires)."""
        return self.compiled.fullmatch(value) is not None

    def anywhere(self, value: str) -> bool:
        """Whether the pattern matches somewhere in ``value`` (as cosign's ``MatchString`` does)."""
        return self.compiled.search(value) is not None

    def __repr__(self) -> str:
        return f"Pattern({self.text!r})"


def _words(err: Exception) -> str:
    """RE2's message: ``pattern too large - compile failed`` named as the limit it is."""
    raw = err.args[0] if err.args else str(err)
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    if "pattern too large" in text:
        return f"the compiled pattern would be larger than RE2's {MAX_PROGRAM_BYTES >> 20} MiB ({text})"
    return text


def _byte_escape(text: str) -> str | None:
    """``\\C`` when ``text`` uses it outside ``\\Q...\\E``: RE2's "any byte", which Go's regexp refuses."""
    index = 0
    while index < len(text) - 1:
        if text[index] != "\\":
            index += 1
            continue
        following = text[index + 1]
        if following == "C":
            return "\\C"
        if following == "Q":
            end = text.find("\\E", index + 2)
            index = len(text) if end < 0 else end + 2
            continue
        index += 2
    return None


@record
class Identity:
    """A keyless signer a rule trusts: the certificate's OIDC issuer and its subject (the SAN: a URI or an email),
    each given exactly or as a regular expression that must match the whole value (cosign's match is unanchored: a
    pattern that relied on a partial match matches nothing here, never more)."""

    issuer: str | None
    issuer_regexp: str | None
    subject: str | None
    subject_regexp: str | None
    #: The line of its ``[[image.signed-by.identities]]`` header.
    line: int | None = None
    #: The regexps compiled (issuer's, subject's): given by the policy's reader; compiled on first use otherwise.
    patterns: tuple[Pattern | None, Pattern | None] | None = field(default=None, compare=False, repr=False)

    def compiled(self) -> tuple[Pattern | None, Pattern | None]:
        """The issuer's and the subject's regexps, compiled (``None``: given exactly)."""
        if self.patterns is not None:
            return self.patterns
        issuer = None if self.issuer_regexp is None else Pattern(self.issuer_regexp)
        return issuer, None if self.subject_regexp is None else Pattern(self.subject_regexp)

    def matches(self, issuer: str, subject: str) -> bool:
        """Whether a certificate of ``issuer`` and ``subject`` is this identity's."""
        issuer_pattern, subject_pattern = self.compiled()
        return _one(issuer, self.issuer, issuer_pattern) and _one(subject, self.subject, subject_pattern)

    def partial(self, issuer: str, subject: str) -> str | None:
        """When cosign would take ``issuer`` and ``subject`` for this identity and the policy does not, because a
        regexp matches only part of a value: why, in words for the refusal; else ``None``."""
        said = []
        for (part, flag), pattern, exact, value in zip(
            _PARTS, self.compiled(), (self.issuer, self.subject), (issuer, subject), strict=True
        ):
            if pattern is None:
                if exact != value:
                    return None
            elif not pattern.anywhere(value):
                return None
            elif not pattern.whole(value):
                said.append(
                    f"{part}-regexp {pattern.text} matches only part of the {part}: {flag} matches anywhere in "
                    "the value, a regexp here must match all of it (write the whole value it means, from ^ to $)"
                )
        return "; ".join(said) or None

    @property
    def shown(self) -> str:
        """``issuer https://…, subject-regexp ^…$``, as the policy writes it."""
        issuer = f"issuer {self.issuer}" if self.issuer is not None else f"issuer-regexp {self.issuer_regexp}"
        subject = (
            f"subject {self.subject}" if self.subject is not None else f"subject-regexp {self.subject_regexp}"
        )
        return f"{issuer}, {subject}"


#: Each part of an identity: its name, and cosign's flag for its regexp.
_PARTS = (
    ("issuer", "cosign's --certificate-oidc-issuer-regexp"),
    ("subject", "cosign's --certificate-identity-regexp"),
)


def _one(value: str, exact: str | None, pattern: Pattern | None) -> bool:
    if exact is not None:
        return value == exact
    return pattern is not None and pattern.whole(value)


class IdentityProblem(ValueError):
    """Why an identity table cannot be used; ``line`` is where (the key's own line when it has one)."""

    def __init__(self, message: str, line: int | None) -> None:
        super().__init__(message)
        self.line = line


def read_identity(
    table: dict[str, Any], line: int | None, path: str, locate: Callable[[str], int | None] | None = None
) -> Identity:
    """The identity of one ``[[image.signed-by.identities]]`` ``table`` whose header is at ``line`` of the policy
    ``path`` (``locate``: the line of one of its keys, as the policy's reader found it): an issuer (``issuer`` or
    ``issuer-regexp``) and a subject (``subject`` or ``subject-regexp``), as cosign requires both; each regexp
    compiled.

    :raises IdentityProblem: an unknown key (with the one meant, cosign's and policy-controller's words known), a
        value that is not a non-empty string, a part missing or given twice, a regexp that does not compile.
    """
    key = "image.signed-by.identities"

    def key_line(name: str) -> int | None:
        return (locate(name) if locate is not None else None) or line

    def problem(what: str, at: int | None = line) -> IdentityProblem:
        where = f"line {at} of {path}" if at else path
        return IdentityProblem(f"{key} ({where}): {what}", at)

    unknown = sorted(set(table) - set(KEYS))
    if unknown:
        raise problem(f"unknown key '{unknown[0]}' ({_known(unknown[0])})", key_line(unknown[0]))
    for name, value in table.items():
        if not isinstance(value, str) or not value:
            raise problem(f"{name} must be a non-empty string", key_line(name))
    for part in ("issuer", "subject"):
        given = [k for k in (part, f"{part}-regexp") if k in table]
        if len(given) != 1:
            raise problem(
                f"an identity needs its {part}: {part} or {part}-regexp (cosign requires both an issuer and a "
                "subject)"
                if not given
                else f"give {part} or {part}-regexp, not both"
            )
    compiled: list[Pattern | None] = []
    for name in ("issuer-regexp", "subject-regexp"):
        try:
            compiled.append(Pattern(table[name]) if name in table else None)
        except PatternProblem as err:
            raise problem(
                f"{name} is not a valid regular expression (Go's regexp syntax, as cosign reads it): {err}",
                key_line(name),
            ) from None
    return Identity(
        table.get("issuer"), table.get("issuer-regexp"), table.get("subject"), table.get("subject-regexp"),
        line, (compiled[0], compiled[1]),
    )  # fmt: skip


def _known(word: str) -> str:
    """``did you mean subject? cosign's --certificate-identity is subject here; known here: ...``."""
    from preparer._near import closest  # deferred: only a mistake asks

    kebab = _kebab(word)
    meant = SYNONYMS.get(word) or (kebab if kebab in KEYS else SYNONYMS.get(kebab))
    if meant is not None:
        return f"did you mean {meant}? {_tool(word)} is {meant} here; known here: {', '.join(KEYS)}"
    near = closest(word, KEYS)
    return (f"did you mean {near}? " if near else "") + f"known here: {', '.join(KEYS)}"


def _kebab(word: str) -> str:
    """``subjectRegExp`` as ``subject-regexp``: policy-controller's camel case, in the policy's spelling."""
    spelled = "".join(f"-{c.lower()}" if c.isupper() else c for c in word).replace("reg-exp", "regexp")
    return spelled.replace("_", "-").lstrip("-")


def _tool(word: str) -> str:
    """Whose word ``word`` is: ``cosign's --certificate-identity``, ``policy-controller's subjectRegExp``."""
    if word.startswith("certificate-"):
        return f"cosign's --{word}"
    if word.startswith("cert-"):
        return f"sigstore's --{word}"
    if word != word.lower():
        return f"policy-controller's {word}"
    return f"'{word}'"
