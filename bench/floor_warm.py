"""The floor of a warm run for the build user: what installing the download cache's trees as hard links must do.

``python floor_warm.py CACHE DEST``: the interpreter starts, imports typer as the command does (the cycle collector
paused), reads each cached tree's manifest (the list of what to link: without it, the trees would have to be
walked), makes each tree's directories once and hard-links every file through directory descriptors, half of the
trees in each of two forked processes (on two cores, two processes link faster than two threads: the interpreter
lock is held between the calls). Nothing is checked or revalidated, no project.toml is read and no order is written.
The benchmark times this beside the cold ``curl | tar`` baseline: the warm run's ratio can come down to this one,
not below it.
"""

from __future__ import annotations

import gc
import json
import os
import sys

gc.disable()  # as the command imports typer: with the cycle collector paused, the rest frozen (preparer.__main__)
import typer  # noqa: F401 (the command's own import: part of the floor)

gc.freeze()
gc.enable()

WORKERS = 2


def main(cache: str, dest: str) -> None:
    trees = os.path.join(cache, "trees", "sha256")
    entries = sorted(os.path.join(trees, name) for name in os.listdir(trees))
    children = []
    for worker in range(WORKERS):
        pid = os.fork()
        if pid == 0:
            for number, entry in list(enumerate(entries))[worker::WORKERS]:
                _link_tree(entry, os.path.join(dest, str(number)))
            os._exit(0)
        children.append(pid)
    for pid in children:
        _, status = os.waitpid(pid, 0)
        if status:
            sys.exit(1)


def _link_tree(entry: str, out: str) -> None:
    with open(os.path.join(entry, "manifest.json"), "rb") as f:
        manifest = json.loads(f.read())
    root = os.path.join(entry, "root")
    os.mkdir(out)
    for rel in sorted(manifest["dirs"]):
        if rel:
            os.mkdir(os.path.join(out, rel))
    by_dir: dict[str, list[str]] = {}
    for rel in manifest["files"]:
        directory, _, name = rel.rpartition("/")
        by_dir.setdefault(directory, []).append(name)
    flags = os.O_RDONLY | os.O_DIRECTORY
    for directory, names in by_dir.items():
        source, target = (
            os.open(os.path.join(root, directory), flags),
            os.open(os.path.join(out, directory), flags),
        )
        for name in names:
            os.link(name, name, src_dir_fd=source, dst_dir_fd=target, follow_symlinks=False)
        os.close(source)
        os.close(target)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
    os._exit(0)  # as the command ends: no interpreter teardown
