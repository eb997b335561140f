"""One module per on-disk format the preparer reads or writes: ``order.toml``, ``buildpack.toml``, TOML itself."""


class MalformedError(Exception):
    """A file's content is not what its format says; the caller names whose file it is in the error it raises."""
