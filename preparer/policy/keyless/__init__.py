"""Keyless (Sigstore) signatures, verified offline against the platform's copy of Sigstore's trusted root.

The pieces, each a module of its own:

- :mod:`.model`: what every piece shares: the trusted root, the evidence a signature object carries, the verdict.
- :mod:`.root`: ``trusted_root.json`` (sigstore/protobuf-specs) read into a :class:`~.model.TrustedRoot`.
- :mod:`.certs`: the leaf certificate: its chain to a Fulcio CA at the signing time, its embedded SCT, the Sigstore
  X.509 profile, and the identity it names (SAN, OIDC issuer).
- :mod:`.tlog`: the transparency log: a Rekor entry's signed entry timestamp, inclusion proof and checkpoint, and
  that the entry is for this signature, certificate and digest.
- :mod:`.tsa`: RFC 3161 timestamps from a timestamp authority of the trusted root.
- :mod:`.evidence`: a Sigstore bundle (v0.1 to v0.3) or a cosign ``.sig`` layer's annotations read into
  :class:`~.model.Evidence`.
- :mod:`.verify`: all of it in order, one :class:`~.model.Verdict` or one :class:`~.model.KeylessProblem`.

Nothing here asks the network: the trusted root file is all that is trusted. Everything else (which identities a
rule trusts, which digest an image needs) is the policy's (:mod:`preparer.policy.signatures`).
"""
