"""The signed-image scenario: an image pushed to the suite's registry, signed as cosign signs it, a policy of
``[[image.signed-by]]`` rules that names its keys or identities, and the real CLI run on a project that fetches it.

- :func:`push_image` (or :meth:`Scene.image`) pushes a one-buildpack buildpackage (``acme/<buildpack>`` 1.0.0) to a
  repository of its own; the :class:`Image` it returns names it (:attr:`Image.tagged`, :attr:`Image.pinned`, through
  another host with :meth:`Image.via`) and signs it: :meth:`Image.sign` with a key (``cosign sign --key``),
  :meth:`Image.sign_keyless` with the tests' own Sigstore (``cosign sign``, tests/keyless_sign.py), each in the
  format the call names: ``"sig"``, cosign's tag scheme (a layer of the manifest at tag ``sha256-<hex>.sig``), or
  ``"bundle"``, cosign v3's Sigstore bundle attached as a referrer.
- :func:`write_policy` (or :meth:`Scene.policy`) writes a policy of :class:`Rule` s, each naming its images, keys
  (key files, or keys written as they are) and :class:`Identity` s (:data:`RELEASES`: the tests' release workflow),
  under a head (a comment, or the ``[sigstore]`` table that names a trusted root); the rules stand where the
  messages' line numbers say.
- The fixture ``scene`` is one test's :class:`Scene`: the suite's registry, the test's directory, and the CLI run on
  its layout with ``-policy`` (:meth:`Scene.run`); the fixture ``signer`` is a new Sigstore of the test's own.

Nothing here chooses a key, an identity, a format or a rule for a test: each test says which it uses.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import pytest

from tests.golden import Layout, listing
from tests.keyless import GITHUB_ISSUER, T0, Leaf
from tests.plugins.cli import Result
from tests.plugins.registry import Registry, buildpack_layer, push_package
from tests.plugins.signing import Key, bundle_sign, cosign_sign
from tests.projects import group

if TYPE_CHECKING:  # the keyless kit imports the preparer's keyless verifier: only keyless tests load it
    from tests.keyless_sign import Signer

#: Where a signature is kept: cosign's tag scheme (``sha256-<hex>.sig``), or a Sigstore bundle among the referrers.
Form = Literal["sig", "bundle"]


@dataclass(frozen=True)
class Image:
    """A buildpackage image in ``registry``: its ``repository`` and manifest ``digest``; ``host`` is the registry
    the references name (the registry's own, or a front that passes requests to it: :meth:`via`)."""

    registry: Registry
    repository: str
    digest: str
    host: str = ""

    def __post_init__(self) -> None:
        if not self.host:
            object.__setattr__(self, "host", self.registry.host)

    @property
    def name(self) -> str:
        """``<host>/<repository>``, as a signature names the image it signs."""
        return f"{self.host}/{self.repository}"

    @property
    def tagged(self) -> str:
        """The reference by its tag: ``<host>/<repository>:latest``."""
        return f"{self.name}:latest"

    @property
    def pinned(self) -> str:
        """The reference by digest: ``<host>/<repository>@<digest>``."""
        return f"{self.name}@{self.digest}"

    def via(self, host: str) -> Image:
        """The same image named through ``host`` (a front of the registry)."""
        return dataclasses.replace(self, host=host)

    def sign(self, key: Key, form: Form, *, signed_digest: str | None = None, tag_schema: bool = True) -> str:
        """``cosign sign --key``: one signature by ``key`` in ``form``, for ``signed_digest`` (default the image's
        own digest); a bundle is listed in the referrers tag schema's index unless not ``tag_schema``. The digest
        of the manifest that holds the signature."""
        if form == "sig":
            assert tag_schema, "the tag scheme has no referrers index"
            return cosign_sign(self.registry, self.repository, self.digest, key, signed_digest)
        referrer, _ = bundle_sign(self.registry, self.repository, self.digest, key, signed_digest, tag_schema)
        return referrer

    def sign_keyless(self, signer: Signer, form: Form, leaf: Leaf | None = None, at: int = T0) -> str:
        """``cosign sign`` with a Fulcio certificate of ``signer``'s Sigstore (``leaf``, default one for the tests'
        workflow valid around ``at``), logged in its Rekor at ``at``; the digest of the manifest that holds it."""
        from tests.keyless_sign import bundle_keyless, cosign_keyless

        sign = cosign_keyless if form == "sig" else bundle_keyless
        return sign(self.registry, self.repository, self.digest, signer, leaf, at=at)


def push_image(
    registry: Registry,
    directory: Path,
    repository: str | None = None,
    *,
    namespace: str = "signed",
    buildpack: str = "signed",
) -> Image:
    """Push a buildpackage of the one buildpack ``acme/<buildpack>`` 1.0.0 to ``repository`` (default
    ``<namespace>/<random>``) at the tag ``latest``; its sources are made below ``directory``."""
    bp = (f"acme/{buildpack}", "1.0.0")
    repository = repository or f"{namespace}/{uuid.uuid4().hex[:12]}"
    layer = buildpack_layer(directory / f"src-{uuid.uuid4().hex[:6]}", [(*bp, "")])
    digest, _ = push_package(registry, repository, "latest", [(layer, [(*bp, "")])], bp)
    return Image(registry, repository, digest)


@dataclass(frozen=True)
class Identity:
    """One ``[[image.signed-by.identities]]``: the OIDC issuer and the subject, exact or a whole-value pattern."""

    issuer: str
    subject: str = ""
    subject_regexp: str = ""

    def toml(self) -> str:
        text = f'issuer = "{self.issuer}"\n'
        if self.subject:
            text += f'subject = "{self.subject}"\n'
        if self.subject_regexp:  # a literal string: a pattern's backslashes as written
            text += f"subject-regexp = '{self.subject_regexp}'\n"
        return text


#: The identity of the workflow the tests' certificates name (tests/keyless.py ``WORKFLOW``), any branch.
SUBJECT_REGEXP = r"^https://github\.com/acme/buildpacks/\.github/workflows/release\.yml@refs/heads/.*$"
#: That workflow trusted as a platform trusts its release workflow: its issuer, and the subject on any branch.
RELEASES = Identity(GITHUB_ISSUER, subject_regexp=SUBJECT_REGEXP)


@dataclass(frozen=True)
class Rule:
    """One ``[[image.signed-by]]``: the image globs it covers, the keys it trusts (a path: a key file, written
    relative to the policy; a string: written as it is, an inline PEM block or a key service's URI), and the
    identities it trusts."""

    images: Sequence[str]
    keys: Sequence[Path | str] = ()
    identities: Sequence[Identity] = ()

    def toml(self, directory: Path) -> str:
        text = f"[[image.signed-by]]\nimages = {json.dumps(list(self.images))}\n"
        if self.keys:
            written = [str(k.relative_to(directory)) if isinstance(k, Path) else k for k in self.keys]
            text += f"keys = {json.dumps(written)}\n"
        for identity in self.identities:
            text += f"\n[[image.signed-by.identities]]\n{identity.toml()}"
        return text


def write_policy(
    directory: Path,
    *rules: Rule,
    trusted_root: Path | None = None,
    head: str = "# signatures\n",
    name: str = "policy.toml",
) -> Path:
    """Write ``directory/name``: ``head`` (with a ``trusted_root``, the ``[sigstore]`` table naming it instead), then
    each rule, a blank line between each. With the default head the first rule is at line 3; after the
    ``[sigstore]`` table, at line 4."""
    if trusted_root is not None:
        head = f'[sigstore]\ntrusted-root = "{trusted_root.relative_to(directory)}"\n'
    path = directory / name
    path.write_text("\n".join([*([head] if head else []), *(rule.toml(directory) for rule in rules)]))
    return path


@dataclass(frozen=True)
class Scene:
    """One test's signed-image scenario: the suite's ``registry``, the test's ``directory`` (pytest's
    ``tmp_path``), and the CLI on the test's ``layout``."""

    registry: Registry
    directory: Path
    layout: Layout
    preparer: Callable[..., Result]

    def image(
        self, repository: str | None = None, *, namespace: str = "signed", buildpack: str = "signed"
    ) -> Image:
        """An image pushed to the suite's registry (:func:`push_image`)."""
        return push_image(self.registry, self.directory, repository, namespace=namespace, buildpack=buildpack)

    def policy(
        self,
        *rules: Rule,
        trusted_root: Path | None = None,
        head: str = "# signatures\n",
        name: str = "policy.toml",
    ) -> Path:
        """A policy in the test's directory (:func:`write_policy`)."""
        return write_policy(self.directory, *rules, trusted_root=trusted_root, head=head, name=name)

    def run(self, policy: Path, ref: str, *flags: str) -> Result:
        """The CLI with ``-policy policy`` and ``flags``, on a project whose group fetches ``docker://<ref>``."""
        return self.preparer("-policy", str(policy), *flags, project=group(f"docker://{ref}"))

    def installed(self, buildpack: str = "signed") -> bool:
        """Whether the run installed the image's buildpack ``acme/<buildpack>`` 1.0.0."""
        return f"acme_{buildpack}/1.0.0/" in listing(self.layout.buildpacks)


@pytest.fixture
def scene(registry: Registry, tmp_path: Path, layout: Layout, preparer: Callable[..., Result]) -> Scene:
    return Scene(registry, tmp_path, layout, preparer)


@pytest.fixture
def signer(tmp_path: Path) -> Signer:
    """A new Sigstore of the test's own and its Rekor log; its trusted root in ``tmp_path/sigstore``."""
    from tests.keyless_sign import make_signer

    return make_signer(tmp_path / "sigstore")
