"""The store's records of an image's signatures: the objects that satisfied a policy, as the registry held them,
and when it was asked. A record spares the registry's requests for the policy's ``signature-max-age``, never its
verification: what is read back is verified again with the run's keys, as if the registry had sent it. This pod's
record first, else the fleet's; a repository that asked for credentials is neither shared nor used without a
request.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from preparer.fetch.cache import dumps_signature_record, signature_record
from preparer.fetch.store.blobs import Unkept
from preparer.fetch.store.files import spooled
from preparer.fetch.streams import sha256_of

if TYPE_CHECKING:
    from preparer.fetch.guard import SignatureObject
    from preparer.fetch.store.tiers import Local, Shared, Writes


class SignatureRecords:
    """The store's signature records for one run: this pod's cache, the fleet's repository and what the run writes
    back to it (each ``None``: absent)."""

    def __init__(
        self, local: Local | None, fleet: Shared | None, writeback: Writes | None, unkept: Unkept
    ) -> None:
        self.local, self.fleet, self.writeback, self.unkept = local, fleet, writeback, unkept

    def recorded(self, repository: str, digest: str, max_age: float) -> list[SignatureObject] | None:
        """The signature objects recorded for the image ``digest`` of ``repository`` at most ``max_age`` seconds
        after the registry was asked for them: this pod's record, else the fleet's; ``None`` without such a record
        (one without a time, written by an older preparer, is too old), or for a repository that asked for
        credentials (the registry must then answer the run's own). What is returned is to be verified as if the
        registry had sent it."""
        local, fleet = self.local, self.fleet
        if max_age <= 0 or (local is not None and local.is_private(repository)):
            return None
        import time  # deferred: only runs whose policy asks for signatures

        now = time.time()
        recorded = local.signatures(repository, digest) if local is not None else None
        if (recorded is None or not recorded.fresh(max_age, now)) and fleet is not None and fleet.usable:
            shared = fleet.signatures(repository, digest)
            recorded = signature_record(shared) if shared is not None else None
        if recorded is None or not recorded.fresh(max_age, now):
            return None
        return _objects(recorded.objects)

    def keep(
        self, repository: str, digest: str, objects: Sequence[SignatureObject], private: bool, spool: Path
    ) -> None:
        """Record the signature objects that satisfied the policy for the image ``digest`` of ``repository``, with
        the time the registry was asked (now), in this pod's cache and (``spool``: where its file waits for the
        write-back) the fleet's (``private``: the registry asked for credentials: never shared, and not used again
        without a request)."""
        local, writeback = self.local, self.writeback
        if not objects or (local is None and writeback is None):
            return
        import base64  # deferred, as above
        import time

        objects_record: list[dict[str, Any]] = [
            {"format": o.format, "found": o.found, "payload": base64.b64encode(o.payload).decode()}
            | ({"signature": o.signature} if o.signature is not None else {})
            | ({"annotations": dict(o.annotations)} if o.annotations else {})
            for o in objects
        ]
        data = dumps_signature_record(objects_record, int(time.time()))
        if local is not None and not self.unkept.is_set():
            try:
                if private:  # first, as for a manifest: a copy is never kept without its mark
                    local.mark_private(repository)
                local.put_signatures(repository, digest, data)
            except OSError as err:
                if not self.unkept.met(err, repository, only_cache=True):
                    raise
        if writeback is not None and not private:  # what credentials fetched is never shared
            writeback.remember_signatures(
                spooled(data, "signatures-", spool), sha256_of(data), repository, digest
            )


def _objects(recorded: list[dict[str, Any]]) -> list[SignatureObject] | None:
    """The signature objects of a record, as the registry held them; ``None`` when one is not as a record writes
    it (then the record is not used)."""
    import base64  # deferred: only runs whose policy asks for signatures

    from preparer.fetch.guard import SignatureObject  # deferred, as base64

    found = []
    for obj in recorded:
        payload = obj.get("payload")
        try:
            data = base64.b64decode(payload or "-", validate=True)
        except ValueError:
            return None
        found_at, signature = obj.get("found", ""), obj.get("signature")
        annotations: dict[str, str] = obj.get("annotations", {})
        if not isinstance(annotations, dict) or not all(isinstance(v, str) for v in annotations.values()):
            return None
        if obj.get("format") == "cosign":
            found.append(SignatureObject("cosign", found_at, data, signature, tuple(annotations.items())))
        elif obj.get("format") == "bundle":
            found.append(SignatureObject("bundle", found_at, data, signature))
        else:
            return None
    return found or None
