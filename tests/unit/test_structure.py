"""The package's shape, as the structure issue asks it to stay: short functions, no private names across
modules, no import cycle (counting every import: deferred ones and those for type checking too), and imports
inside functions only where they defer a cost (and say so)."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import TypeGuard

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "preparer"
MAX_FUNCTION_LINES = 60


def _modules() -> dict[str, tuple[Path, ast.Module]]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = (path, ast.parse(path.read_text(encoding="utf-8")))
    return found


MODULES = _modules()


def _functions(tree: ast.Module) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]


def _imported(name: str, tree: ast.Module) -> set[str]:
    """The package's modules that ``name`` imports anywhere: at module level, under ``if TYPE_CHECKING:`` and inside
    functions alike (``from preparer import interrupt`` imports the module ``preparer.interrupt``)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("preparer"):
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                found.add(submodule if submodule in MODULES else node.module or "")
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in MODULES)
    return found & set(MODULES) - {name}


def test_the_package_is_found() -> None:
    assert "preparer.cli" in MODULES and "preparer.fetch.tree" in MODULES


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_function_is_longer_than_sixty_lines(module: str) -> None:
    _, tree = MODULES[module]
    lengths = {f.name: (f.end_lineno or f.lineno) - f.lineno + 1 for f in _functions(tree)}
    assert {name: n for name, n in lengths.items() if n > MAX_FUNCTION_LINES} == {}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_private_name_is_imported_from_another_module(module: str) -> None:
    _, tree = MODULES[module]
    private = [
        f"{n.module}.{alias.name}"
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("preparer")
        for alias in n.names
        if alias.name.startswith("_") and not alias.name.startswith("__")
    ]
    assert private == []


def test_imports_have_no_cycle() -> None:
    edges = {name: _imported(name, tree) for name, (_, tree) in MODULES.items()}
    cycles: list[list[str]] = []

    def visit(name: str, path: list[str]) -> None:
        for dep in sorted(edges[name]):
            if dep in path:
                cycles.append([*path[path.index(dep) :], dep])
            elif len(path) < len(MODULES):
                visit(dep, [*path, dep])

    for name in sorted(edges):
        visit(name, [name])
    assert cycles == []


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_inside_functions_say_why_they_are_deferred(module: str) -> None:
    path, tree = MODULES[module]
    lines = path.read_text(encoding="utf-8").splitlines()
    unexplained = []
    for function in _functions(tree):
        statements = [n for n in ast.walk(function) if isinstance(n, ast.Import | ast.ImportFrom)]
        blocks_start = {n.lineno for n in statements} - {n.end_lineno + 1 for n in statements if n.end_lineno}
        for first in sorted(blocks_start):
            end = max(n.end_lineno or n.lineno for n in statements if n.lineno >= first)
            window = "\n".join(lines[max(0, first - 3) : end]).lower()
            if "deferred" not in window and "defer" not in window:
                unexplained.append(f"{path.name}:{first}: {lines[first - 1].strip()}")
    assert unexplained == []


#: The top of the package: the fetch floor below it imports none of these (the policy reaches it as a Guard).
TOP = ("preparer.inputs", "preparer.resolve", "preparer.settings", "preparer.plan", "preparer.policy",
       "preparer.policy.rules", "preparer.policy.enforce", "preparer.policy.reader", "preparer.policy.problems",
       "preparer.policy.signed_by", "preparer.policy.budget", "preparer.lock", "preparer.lock.modes",
       "preparer.lock.freeze", "preparer.lock.checks", "preparer.lock.entries", "preparer.pipeline",
       "preparer.entrypoints", "preparer.apply", "preparer.staging", "preparer.config", "preparer.cli")  # fmt: skip


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("preparer.fetch")))
def test_fetch_is_a_floor_below_the_pipeline(module: str) -> None:
    _, tree = MODULES[module]
    assert sorted(_imported(module, tree) & set(TOP)) == []


#: The store's room (preparer/fetch/store/): the store and its ways through the tiers, by kind of thing kept.
STORE = sorted(m for m in MODULES if m == "preparer.fetch.store" or m.startswith("preparer.fetch.store."))


def _importers(module: str) -> list[str]:
    return sorted(name for name, (_, tree) in MODULES.items() if module in _imported(name, tree))


def test_only_the_store_imports_the_fleet() -> None:
    """The fleet's repository is a tier of the store: besides its own write-back, only the store's room imports it
    (its ways and the roles they ask of it); fetchers ask the store, never the tier."""
    assert _importers("preparer.fetch.fleet") == [
        "preparer.fetch.fleet_writeback",
        "preparer.fetch.store",
        "preparer.fetch.store.archives",
        "preparer.fetch.store.files",
        "preparer.fetch.store.images",
        "preparer.fetch.store.tiers",
    ]
    assert set(_importers("preparer.fetch.fleet_writeback")) <= set(STORE)


def test_the_download_cache_is_reached_through_the_store() -> None:
    """This pod's download cache is a tier of the store too: besides the store's room, only the tree installer
    (which reads a cached tree's manifest) imports it; no fetcher and nothing above fetch/ does."""
    assert _importers("preparer.fetch.cache") == [
        "preparer.fetch.store",
        "preparer.fetch.store.archives",
        "preparer.fetch.store.signatures",
        "preparer.fetch.store.tiers",
        "preparer.fetch.tree",
    ]


def test_only_the_store_takes_an_archive_through_its_tiers() -> None:
    assert _importers("preparer.fetch.store.archives") == ["preparer.fetch.store"]


@pytest.mark.parametrize("way", [m for m in STORE if m.rsplit(".", 1)[-1] not in ("store", "origin")])
def test_fetchers_reach_the_store_s_ways_through_the_store(way: str) -> None:
    """Each kind's way (and the tiers' roles) is the store's own: nothing outside the room imports it. A fetcher
    imports the store, and an archive's fetcher the origin it hands the store."""
    assert set(_importers(way)) <= set(STORE)


def test_only_the_reader_parses_toml() -> None:
    """One TOML reader (files/toml.py): no other module imports or calls a TOML parser (tomli, tomllib); every TOML
    file is read through it, bounded and located alike."""
    parsers = ("tomli", "tomllib")
    found = []
    for name, (path, tree) in MODULES.items():
        if name == "preparer.files.toml":
            continue
        for node in ast.walk(tree):
            imported = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            found += [f"{name}: import {i}" for i in imported if i.split(".")[0] in parsers]
        text = path.read_text(encoding="utf-8")
        found += [f"{name}: {m[0]}" for m in re.finditer(r"\b(?:tomli\.\w+|tomllib\b)", text)]
    assert found == []


def test_only_the_reader_makes_its_pass() -> None:
    """Where keys are written comes from the reader's own pass, part of the same read: no caller runs a scanner."""
    importers = sorted(
        name
        for name, (_, tree) in MODULES.items()
        if {"preparer.files._toml_pass", "preparer.files._toml_words"} & _imported(name, tree)
    )
    assert importers == ["preparer.files.toml"]


def _kinds() -> set[str]:
    """The kinds of source: the classes of fetch/locator.py's closed unions (``Fetchable``, and ``Locator``, which
    adds ``BuilderLocator``)."""
    _, tree = MODULES["preparer.fetch.locator"]
    unions = [
        n.value
        for n in tree.body
        if isinstance(n, ast.Assign) and [ast.unparse(t) for t in n.targets] in (["Fetchable"], ["Locator"])
    ]
    assert len(unions) == 2
    return {n.id for union in unions for n in ast.walk(union) if isinstance(n, ast.Name)} - {"Fetchable"}


KINDS = _kinds()


def _is_kind(node: ast.AST) -> TypeGuard[ast.Name | ast.Attribute]:
    """Whether ``node`` names a locator class: ``HttpLocator``, or ``locators.HttpLocator`` (its module imported
    under a name)."""
    return (isinstance(node, ast.Name) and node.id in KINDS) or (
        isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.attr in KINDS
    )


def _names_a_kind(pattern: ast.pattern) -> bool:
    return any(isinstance(n, ast.MatchClass) and _is_kind(n.cls) for n in ast.walk(pattern))


def _is_never(case: ast.match_case) -> bool:
    """``case _ as never: assert_never(never)``: what makes mypy name a kind the match does not handle."""
    pattern = case.pattern
    return (
        isinstance(pattern, ast.MatchAs)
        and pattern.name is not None
        and ast.unparse(pattern) in (pattern.name, f"_ as {pattern.name}")
        and case.guard is None
        and [ast.unparse(statement) for statement in case.body] == [f"assert_never({pattern.name})"]
    )


def _switches() -> dict[str, list[tuple[str, ast.Match]]]:
    """Every ``match`` over the kinds of source (a case names a locator class), by module, with the function it is in
    (``fetch/locator.py``, which defines them, aside)."""
    found: dict[str, list[tuple[str, ast.Match]]] = {}
    for name, (_, tree) in MODULES.items():
        if name == "preparer.fetch.locator":
            continue
        for function in _functions(tree):
            for node in ast.walk(function):
                if isinstance(node, ast.Match) and any(_names_a_kind(c.pattern) for c in node.cases):
                    found.setdefault(name, []).append((function.name, node))
    return found


SWITCHES = _switches()


def test_every_switch_over_kinds_of_source_ends_in_assert_never() -> None:
    """A kind added to the union fails type-checking (``mypy --strict``) at every match that does not handle it."""
    assert SWITCHES, "no match over the kinds found"
    open_ended = [
        f"{module}.{function}: line {match.lineno}"
        for module, switches in SWITCHES.items()
        for function, match in switches
        if not _is_never(match.cases[-1])
    ]
    assert open_ended == []


def _annotations(tree: ast.Module) -> set[int]:
    """The ``id`` of every node of a type annotation in ``tree``."""
    roots: list[ast.expr | None] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.arg):
            roots.append(node.annotation)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            roots.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            roots.append(node.annotation)
    return {id(n) for root in roots if root is not None for n in ast.walk(root)}


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m != "preparer.fetch.locator"))
def test_kinds_of_source_are_told_apart_only_by_such_matches(module: str) -> None:
    """A locator class is named only to make one, in a type, or in a case of an exhaustive match (where
    ``isinstance`` may tell apart the kinds one case groups): no ``isinstance`` chain, table keyed by class or
    ``else`` that a new kind would fall into unnoticed."""
    _, tree = MODULES[module]
    allowed = _annotations(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            allowed.add(id(node.func))
        elif isinstance(node, ast.MatchClass):
            allowed.add(id(node.cls))
    for _, match in SWITCHES.get(module, []):
        for case in match.cases:
            for statement in case.body:
                for node in ast.walk(statement):
                    if isinstance(node, ast.Call) and ast.unparse(node.func) == "isinstance":
                        allowed |= {id(n) for n in ast.walk(node.args[1])}
    named = [
        f"line {n.lineno}: {ast.unparse(n)}" for n in ast.walk(tree) if _is_kind(n) and id(n) not in allowed
    ]
    assert named == []


def _new_source_places() -> dict[str, set[str]]:
    """The places docs/layout.md's "A new source of buildpacks" names, a line each: `` - `module.py`: `function` ``."""
    layout = (PACKAGE.parent / "docs" / "layout.md").read_text(encoding="utf-8")
    bullet = layout[layout.index("- **A new source of buildpacks**") :]
    bullet = bullet[: bullet.index("\n- **")]
    places: dict[str, set[str]] = {}
    for item in re.split(r"\n  - ", bullet)[1:]:  # an item and the lines that continue it
        row = re.match(r"`([\w/]+)\.py`:", item)
        assert row, item
        module, functions = "preparer." + row[1].replace("/", "."), item[row.end() :]
        places[module] = set(re.findall(r"`(_?[a-z][a-z0-9_]*)`", functions))
    return places


def test_the_layout_names_every_place_a_new_kind_of_source_must_be_handled() -> None:
    """docs/layout.md's "A new source of buildpacks" lists exactly the functions whose matches a new kind fails."""
    in_code = {module: {function for function, _ in switches} for module, switches in SWITCHES.items()}
    assert _new_source_places() == in_code
