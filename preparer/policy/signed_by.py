"""``[[image.signed-by]]`` read from a policy: each rule's images, its keys (read now: a key that cannot be used
stops the run before any request), its identities, and the trusted root they need."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from preparer.descriptor import lookup
from preparer.policy.problems import Findings, known_here
from preparer.policy.rules import Rule, canonical_globs

if TYPE_CHECKING:
    from preparer._types import KeyPath
    from preparer.policy.identity import Identity
    from preparer.policy.keyless.model import TrustedRoot
    from preparer.policy.keys import PublicKey
    from preparer.policy.signatures import SignedBy


class SignedByReader:
    """Reads the ``[[image.signed-by]]`` rules of one policy, each problem kept in its :class:`Findings`.

    :param base: the directory relative key files and the trusted root are read from (``None``: only absolute
        paths); ``keys``: PEM keys given with the policy, by the name its rules give them.
    """

    def __init__(self, found: Findings, base: Path | None, keys: dict[str, bytes]) -> None:
        self.found, self.base, self.given_keys = found, base, keys

    def read(self, doc: dict[str, Any]) -> tuple[SignedBy, ...]:
        """Every ``[[image.signed-by]]`` rule, its keys and the trusted root its identities need read now: a key or a
        root that cannot be used stops the run before any request (exit 3), naming the file and the rule's line."""
        value = lookup(doc, "image.signed-by")
        if value is None:
            return ()
        key = "image.signed-by"
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            raise self.found.fail(key, "must be an array of tables ([[image.signed-by]])")
        from preparer.policy.signatures import SignedBy  # deferred: only policies with signature rules

        root: list[TrustedRoot | None] = []  # read once, for the first rule with identities
        rules = []
        for index, table in enumerate(value):
            line = self.found.line(("image", "signed-by", index))
            where = self.found.where(line)
            before = len(self.found.problems)
            unknown = sorted(set(table) - {"images", "keys", "identities"})
            if unknown:
                known = known_here(unknown[0], ("images", "keys", "identities"))
                self.found.problems.append(
                    self.found.error(key, line, f"{key} ({where}): unknown key '{unknown[0]}' ({known})")
                )
            no_images: tuple[str, ...] = ()
            no_keys: tuple[PublicKey, ...] = ()
            images = self.found.attempt(partial(self.images, table, line, where), no_images)
            keys = self.found.attempt(
                partial(self.keys, table.get("keys"), "identities" in table, key, line, where), no_keys
            )
            identities = self.identities(
                table.get("identities"), ("image", "signed-by", index, "identities"), where
            )
            if identities and not root:
                no_root: TrustedRoot | None = None
                root.append(self.found.attempt(partial(self.trusted_root, doc, where), no_root))
            if len(self.found.problems) == before:
                trusted = root[0] if identities and root else None
                rules.append(SignedBy(tuple(images), keys, line, identities, trusted))
        self.found.rules[key] = Rule(key, self.found.line(key))
        return tuple(rules)

    def images(self, table: dict[str, Any], line: int | None, where: str) -> tuple[str, ...]:
        key = "image.signed-by"
        images = table.get("images", ["*"])
        if not isinstance(images, list) or not images or not all(isinstance(i, str) and i for i in images):
            raise self.found.error(
                key, line, f"{key} ({where}): images must be an array of non-empty strings"
            )
        try:
            return canonical_globs(images)
        except ValueError as err:
            raise self.found.error(key, line, f"{key} ({where}): images: {err}") from None

    def keys(
        self, paths: Any, optional: bool, key: str, line: int | None, where: str
    ) -> tuple[PublicKey, ...]:
        """The keys of one ``[[image.signed-by]]`` rule, read (none when the rule has identities instead): each a
        name given with the policy (:func:`parse_policy`'s ``keys``), a PEM public key written in the policy, or
        a key file."""
        if paths is None and optional:
            return ()
        if not isinstance(paths, list) or not paths or not all(isinstance(p, str) and p for p in paths):
            raise self.found.error(
                key,
                line,
                f"{key} ({where}): keys must be a non-empty array of key files (PEM public keys) or PEM blocks"
                + ("" if optional else ", or the rule must have [[image.signed-by.identities]]"),
            )
        from preparer.policy.keys import KeyProblem, load_key, parse_key, service_key  # deferred: keys only

        keys = []
        for number, written in enumerate(paths, 1):
            refused = service_key(written)
            if refused is not None:
                self.found.problems.append(
                    self.found.error(key, line, f"{key} ({where}): key {written.strip()}: {refused}")
                )
                continue
            # One way to a key from its PEM: written in the policy, or given as bytes by name (parse_policy's keys).
            inline = inline_pem(written)
            given = None if inline else self.given_keys.get(written)
            path = None if inline or given is not None else self.resolve(written)
            if inline:
                shown = f"key {number} (inline PEM)"
            else:
                shown = f"key {written if given is not None or path is None else path}"
            try:
                if inline:
                    keys.append(parse_key(written, f"inline key {number} of the rule at {where}"))
                elif given is not None:
                    keys.append(parse_key(given, written))
                elif path is None:
                    raise KeyProblem("a relative path, and the policy was given without a base directory")
                else:
                    keys.append(load_key(path))
            except KeyProblem as problem:
                self.found.problems.append(
                    self.found.error(key, line, f"{key} ({where}): {shown}: {problem}{self.given(written)}")
                )
        return tuple(keys)

    def given(self, written: str) -> str:
        """``; did you mean 'Team.pub', a key given with the policy?`` when ``written`` is near such a name."""
        if inline_pem(written) or not self.given_keys:
            return ""
        from preparer._near import closest  # deferred: only a mistake asks

        near = closest(written, list(self.given_keys))
        return f"; did you mean '{near}', a key given with the policy?" if near else ""

    def resolve(self, written: str) -> Path | None:
        """The path ``written`` in the policy names: relative to the policy's directory (``None``: it has none)."""
        if Path(written).is_absolute():
            return Path(written)
        return None if self.base is None else self.base / written

    def identities(self, value: Any, path: KeyPath, rule: str) -> tuple[Identity, ...]:
        """The ``[[image.signed-by.identities]]`` of one rule: each an issuer (``issuer`` or ``issuer-regexp``) and a
        subject (``subject`` or ``subject-regexp``), as cosign requires both; a regexp must compile."""
        if value is None:
            return ()
        key = "image.signed-by.identities"
        if not isinstance(value, list) or not value or not all(isinstance(v, dict) for v in value):
            self.found.problems.append(
                self.found.error(
                    key, None, f"{key} (the rule at {rule}): must be an array of tables ([[{key}]])"
                )
            )
            return ()
        found = []
        for index, table in enumerate(value):
            none: Identity | None = None
            identity = self.found.attempt(partial(self.identity, table, (*path, index)), none)
            if identity is not None:
                found.append(identity)
        return tuple(found)

    def identity(self, table: dict[str, Any], at: KeyPath) -> Identity:
        from preparer.policy.identity import IdentityProblem, read_identity  # deferred, as SignedBy

        def locate(name: str) -> int | None:
            return self.found.line((*at, name))

        try:
            return read_identity(table, self.found.line(at), self.found.path, locate)
        except IdentityProblem as problem:
            raise self.found.error("image.signed-by.identities", problem.line, str(problem)) from None

    def trusted_root(self, doc: dict[str, Any], rule: str) -> TrustedRoot:
        """``[sigstore] trusted-root``, read: the trusted root that identity rules need (the rule at ``rule`` has
        one)."""
        key = "sigstore.trusted-root"
        written = lookup(doc, key)
        if written is None:
            raise self.found.error(
                "image.signed-by.identities",
                None,
                f"image.signed-by.identities (the rule at {rule}): an identity rule needs [sigstore] trusted-root, "
                "the platform's copy of Sigstore's trusted root (trusted_root.json)",
            )
        if not isinstance(written, str) or not written:
            raise self.found.fail(key, "must be the path of a trusted_root.json file")
        from preparer.policy.keyless.model import RootProblem  # deferred: only policies with identity rules
        from preparer.policy.keyless.root import load_root

        path = self.resolve(written)
        if path is None:
            raise self.found.fail(
                key, f"{written}: a relative path, and the policy was given without a base directory"
            )
        try:
            return load_root(path)
        except RootProblem as problem:
            inside = f" (at {problem.where})" if problem.where else ""
            raise self.found.fail(key, f"{path}{inside}: {problem}") from None


def inline_pem(written: str) -> bool:
    """Whether a ``keys`` entry is a PEM block written in the policy rather than a name or a path."""
    return written.lstrip().startswith("-----BEGIN ")
