"""The ``preparer`` logger every library module logs to. It never prints by itself: without a handler of the
caller's, records go nowhere (the command installs its own, :mod:`preparer.log`)."""

import logging

log = logging.getLogger("preparer")
log.addHandler(logging.NullHandler())
