"""Identity regexps (policy/identity.py) are Go's: what cosign, sigstore-go and policy-controller accept is accepted
and means the same, matched in time linear in the value whatever the pattern; the policy's whole-value anchoring
stays, and a pattern that matches only part says so; a mistake is located at its own line, with the word meant
when another tool's was written.

The policies are read by the library's own reader (``preparer.check_policy``), with the suite's trusted root.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from preparer import check_policy
from preparer.policy.identity import Identity, Pattern, PatternProblem, read_identity
from tests.keyless import GITHUB_ISSUER, make_sigstore

#: The issue's pattern: an ordinary email rule, and an exponential one for a backtracking matcher.
EMAIL = r"^([a-z0-9]+[._-]?)+@corp\.example$"
#: A subject of 34 characters that made Python's ``re`` run for an hour on :data:`EMAIL` (doubling per character).
ADVERSARIAL = "a" * 33 + "!"


@pytest.mark.parametrize(
    ("pattern", "value"),
    [
        (r"^https://github\.com/acme/.*\z", "https://github.com/acme/x"),
        (r"https://github\.com/(?P<org>[a-z]+)/.*", "https://github.com/acme/x"),
        (r"https://github\.com/(?<org>[a-z]+)/.*", "https://github.com/acme/x"),
        (r"\pL+@corp\.example", "ünïcödé@corp.example"),
        (r"\p{Greek}+@corp\.example", "αβγ@corp.example"),
        (r"[[:alpha:]]+@corp\.example", "ops@corp.example"),
        (r"(?i)OPS@CORP\.EXAMPLE", "ops@corp.example"),
        (r"\Qhttps://github.com/acme/\E.*", "https://github.com/acme/x"),
        (r"(?U)a+", "aaa"),
        (r"\x{41}+", "AAA"),
    ],
    ids=[
        "\\z",
        "(?P<name>)",
        "(?<name>)",
        "\\pL",
        "\\p{Greek}",
        "[[:alpha:]]",
        "(?i)",
        "\\Q...\\E",
        "(?U)",
        "\\x{41}",
    ],
)
def test_go_syntax_is_accepted_and_means_what_it_means_in_go(pattern: str, value: str) -> None:
    compiled = Pattern(pattern)
    assert compiled.whole(value)
    assert not compiled.whole(value + "\n")  # Go's $ and \z: the end of the text, not before a final newline


@pytest.mark.parametrize(
    ("pattern", "says"),
    [
        (r"(a)\1", "invalid escape sequence: \\1"),
        (r"a(?=b)", "invalid perl operator: (?="),
        (r"a\Z", "invalid escape sequence: \\Z"),
        (r"a{1001}", "invalid repetition size: {1001}"),
        (r"a\C", "invalid escape sequence: \\C (Go's regexp has no \\C)"),
        (r"(unclosed", "missing ): (unclosed"),
        (r"a++", "bad repetition operator: ++"),
    ],
    ids=["backreference", "lookahead", "\\Z", "repetition", "\\C", "unclosed", "possessive"],
)
def test_what_go_refuses_is_refused_in_re2s_words(pattern: str, says: str) -> None:
    with pytest.raises(PatternProblem) as caught:
        Pattern(pattern)
    assert str(caught.value) == says


def test_a_literal_backslash_c_and_one_inside_quoting_are_not_the_byte_escape() -> None:
    assert Pattern(r"a\\C").whole("a\\C")
    assert Pattern(r"\Qa\C\E").whole("a\\C")


def test_a_pattern_too_large_for_re2_is_refused_naming_the_bound() -> None:
    with pytest.raises(PatternProblem, match="larger than RE2's 8 MiB"):
        Pattern(r"(\pL|\pN|\pP){1000}")


def test_the_issues_pattern_is_matched_in_microseconds_against_its_adversarial_subject() -> None:
    """Python's ``re`` took about an hour on it (it doubles with each ``a``); RE2 is linear in the subject."""
    pattern = Pattern(EMAIL)
    start = time.perf_counter()
    for _ in range(1000):
        assert not pattern.whole(ADVERSARIAL)
        assert not pattern.anywhere(ADVERSARIAL)
    assert time.perf_counter() - start < 1.0
    long_subject = "a" * (1 << 20) + "!"
    start = time.perf_counter()
    assert not pattern.whole(long_subject)
    assert time.perf_counter() - start < 1.0
    assert pattern.whole("first.last@corp.example")


def identity(**table: str) -> Identity:
    return read_identity(table, 4, "policy.toml")


def test_a_regexp_must_match_the_whole_value_and_a_partial_match_says_so_in_cosigns_words() -> None:
    subject = "https://github.com/acme/buildpacks/.github/workflows/release.yml@refs/heads/main"
    partial = identity(issuer=GITHUB_ISSUER, **{"subject-regexp": r"github\.com/acme/buildpacks"})
    assert not partial.matches(GITHUB_ISSUER, subject)
    assert partial.partial(GITHUB_ISSUER, subject) == (
        r"subject-regexp github\.com/acme/buildpacks matches only part of the subject: cosign's "
        "--certificate-identity-regexp matches anywhere in the value, a regexp here must match all of it (write "
        "the whole value it means, from ^ to $)"
    )
    issuer_partial = identity(**{"issuer-regexp": r"actions\.githubusercontent", "subject": subject})
    assert "cosign's --certificate-oidc-issuer-regexp" in str(issuer_partial.partial(GITHUB_ISSUER, subject))
    # Not a partial match: a pattern that matches nowhere, or an exact value that differs, says nothing more.
    assert (
        identity(issuer=GITHUB_ISSUER, **{"subject-regexp": "gitlab"}).partial(GITHUB_ISSUER, subject) is None
    )
    assert partial.partial("https://other.example", subject) is None
    whole = identity(issuer=GITHUB_ISSUER, **{"subject-regexp": r"^https://github\.com/acme/buildpacks/.*$"})
    assert whole.matches(GITHUB_ISSUER, subject) and whole.partial(GITHUB_ISSUER, subject) is None


def test_an_identity_built_without_the_reader_compiles_its_patterns_on_use() -> None:
    built = Identity(GITHUB_ISSUER, None, None, r"^([a-z0-9]+[._-]?)+@corp\.example$")
    assert built.matches(GITHUB_ISSUER, "ops@corp.example")
    assert not built.matches(GITHUB_ISSUER, ADVERSARIAL)


def write_policy(tmp_path: Path, identity_lines: str) -> Path:
    root = make_sigstore().trusted_root(tmp_path / "trusted_root.json")
    path = tmp_path / "policy.toml"
    path.write_text(
        f'[sigstore]\ntrusted-root = "{root.name}"\n\n[[image.signed-by]]\nimages = ["*"]\n\n'
        f"[[image.signed-by.identities]]\n{identity_lines}"
    )
    return path


def test_an_invalid_regexp_is_located_at_its_own_line(tmp_path: Path) -> None:
    path = write_policy(
        tmp_path, f'issuer = "{GITHUB_ISSUER}"\n# the release workflow\nsubject-regexp = "(a"\n'
    )
    [problem] = check_policy(path)
    assert (problem.key, problem.line) == ("image.signed-by.identities", 10)
    assert problem.cause == (
        f"image.signed-by.identities (line 10 of {path}): subject-regexp is not a valid regular expression (Go's "
        "regexp syntax, as cosign reads it): missing ): (a"
    )


def test_the_issues_pattern_is_accepted_by_the_policy(tmp_path: Path) -> None:
    path = write_policy(tmp_path, f"issuer = \"{GITHUB_ISSUER}\"\nsubject-regexp = '{EMAIL}'\n")
    assert check_policy(path) == ()


@pytest.mark.parametrize(
    ("written", "meant", "whose"),
    [
        ("certificate-identity", "subject", "cosign's --certificate-identity"),
        ("certificate-identity-regexp", "subject-regexp", "cosign's --certificate-identity-regexp"),
        ("certificate-oidc-issuer", "issuer", "cosign's --certificate-oidc-issuer"),
        ("certificate-oidc-issuer-regexp", "issuer-regexp", "cosign's --certificate-oidc-issuer-regexp"),
        ("subjectRegExp", "subject-regexp", "policy-controller's subjectRegExp"),
        ("issuerRegExp", "issuer-regexp", "policy-controller's issuerRegExp"),
        ("cert-identity", "subject", "sigstore's --cert-identity"),
    ],
)
def test_another_tools_word_for_a_key_gets_the_one_meant(
    tmp_path: Path, written: str, meant: str, whose: str
) -> None:
    path = write_policy(tmp_path, f'issuer-regexp = ".*"\nsubject = "x"\n{written} = "y"\n')
    [problem] = check_policy(path)
    assert problem.line == 10
    assert problem.cause == (
        f"image.signed-by.identities (line 10 of {path}): unknown key '{written}' (did you mean {meant}? {whose} is "
        f"{meant} here; known here: issuer, issuer-regexp, subject, subject-regexp)"
    )
