"""The lock (``-lock FILE``): what each buildpack entry resolved to, so that every rebuild installs the same bytes.

A run with a lock that does not exist yet resolves as usual and writes it with the commit (docs/lock.md). A run
with an existing lock is *frozen* to it before anything is fetched: images are pulled by the locked digest, http
archives must hash to the locked digest (a warm cache serves them with no request), registry ids use the locked
image without asking the registry's index, a builder's buildpack stays at the locked version. An image locked
through an index is pulled by the index's digest, and must lead to the locked manifest. An entry that no longer
matches the lock is exit 3, before any request; bytes that differ from the locked digest are exit 1, said as the
lock's decision. ``-update-lock`` rewrites it, resolving again only what the project changed and the entries named,
as ``uv lock`` does.

A lock holds each target's entries (a team building for amd64 and arm64 commits one lock): a run freezes to,
checks and rewrites only its own target's, and ``-update-lock`` on a target the lock lacks adds that target's
entries, an image entry through the index the other targets locked.

A lock is the app's input, like ``project.toml``: it narrows what an entry may resolve to and never widens what the
platform allows. A locked image must be in the repository the entry names, a locked URL must be the URL it names;
the platform policy and its signature rules apply to what is locked exactly as to what is written.

The room (the file's format is :mod:`preparer.files.lockfile`'s):

- :mod:`~preparer.lock.modes`: the lock's only entry from the top. Which lock a run has and what it does with it
  (frozen, update, write, or a file at the documented place that it does not use), at planning, after fetching, at
  the commit and in a dry run.
- :mod:`~preparer.lock.freeze`: a plan frozen to its lock, or to the entries an update keeps.
- :mod:`~preparer.lock.checks`: what was fetched, checked against the lock; a fetch's failure said as the lock's.
- :mod:`~preparer.lock.entries`: what the lock a run writes holds, and what rewriting it changes.
"""
