"""``@record``: what a caller of a frozen dataclass relies on holds for a record too."""

from __future__ import annotations

import dataclasses
import inspect
import pickle
from collections.abc import Callable
from typing import ClassVar

import pytest

from preparer._record import field, record
from preparer.fetch.locator import BuilderLocator, IdLocator
from preparer.report import BuildpackRecord, Report


@record
class Point:
    """A point."""

    x: int
    y: int = 0
    tags: list[str] = field(default_factory=list)
    secret: str = field(default="", repr=False, compare=False)


@record(kw_only=True)
class Options:
    """Keyword arguments only."""

    name: str
    level: int = 1


@record(frozen=False)
class Counter:
    """Assignable."""

    count: int = 0


def test_built_compared_and_shown_as_a_dataclass_is() -> None:
    assert Point(1) == Point(1, 0, [], "other secret")  # secret is not compared
    assert Point(1) != Point(2)
    assert repr(Point(1, 2, ["a"], "hunter2")) == "Point(x=1, y=2, tags=['a'])"  # repr=False is never shown
    assert hash(Point(1, tags=())) == hash(Point(1, tags=()))  # type: ignore[arg-type]
    assert Point(1).tags is not Point(1).tags  # a factory per instance
    assert Options(name="a") == Options(name="a", level=1)


def test_records_of_different_classes_with_equal_fields_differ() -> None:
    installed: object = BuilderLocator("a/b", "1")
    assert installed != IdLocator("a/b", "1")
    assert len({BuilderLocator("a/b", "1"), IdLocator("a/b", "1")}) == 2


def test_wrong_arguments_are_type_errors_as_python_words_them() -> None:
    cases: list[tuple[Callable[[], object], str]] = [
        (lambda: Point(), "missing required argument: 'x'"),  # type: ignore[call-arg]
        (lambda: Point(1, 2, [], "", 5), "takes 4 positional arguments but 5 were given"),  # type: ignore[call-arg]
        (lambda: Point(1, x=2), "got multiple values for argument 'x'"),  # type: ignore[misc]
        (lambda: Point(1, z=2), "got an unexpected keyword argument 'z'"),  # type: ignore[call-arg]
        (lambda: Options("a"), "takes 0 positional arguments"),  # type: ignore[call-arg]
    ]
    for make, words in cases:
        with pytest.raises(TypeError, match=words):
            make()


def test_frozen_unless_asked_otherwise() -> None:
    point = Point(1)
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'x'"):
        point.x = 2  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot delete field 'x'"):
        del point.x
    counter = Counter()
    counter.count += 1
    assert counter == Counter(1)
    with pytest.raises(TypeError, match="unhashable"):
        hash(counter)


def test_the_dataclasses_functions_pickle_and_match_work() -> None:
    point = Point(1, 2, ["a"], "s")
    assert dataclasses.is_dataclass(point)
    assert [f.name for f in dataclasses.fields(point)] == ["x", "y", "tags", "secret"]
    assert dataclasses.replace(point, y=3) == Point(1, 3, ["a"])
    assert dataclasses.asdict(point) == {"x": 1, "y": 2, "tags": ["a"], "secret": "s"}
    assert pickle.loads(pickle.dumps(point)) == point
    match point:
        case Point(x, y):
            assert (x, y) == (1, 2)
        case _:
            pytest.fail("no match")
    report = Report(buildpacks=(BuildpackRecord("a/b", "1", "/x", "installed"),))
    assert pickle.loads(pickle.dumps(report)) == report


def test_the_signature_help_shows_is_the_fields() -> None:
    signature = "(x: 'int', y: 'int' = 0, tags: 'list[str]' = <factory>, secret: 'str' = '')"
    assert str(inspect.signature(Point)) == signature
    assert str(inspect.signature(Options)) == "(*, name: 'str', level: 'int' = 1)"


def _records() -> list[type]:
    """Every record class of the package, each module imported."""
    import importlib
    import pkgutil

    import preparer

    found = []
    for info in pkgutil.walk_packages(preparer.__path__, "preparer."):
        module = importlib.import_module(info.name)
        found += [
            v for v in vars(module).values()
            if isinstance(v, type) and "__record__" in v.__dict__ and v.__module__ == info.name
        ]  # fmt: skip
    return found


def _as_dataclasses_makes_it(cls: type) -> type:
    """``cls`` defined again from its source, made by ``dataclasses.dataclass`` as a record asks it to."""

    def reference(given: type | None = None, /, *, kw_only: bool = False, frozen: bool = True) -> object:
        def make(each: type) -> type:
            each.__signature__ = vars(cls)["__signature__"]  # type: ignore[attr-defined]  # as a record's
            return dataclasses.dataclass(each, init=False, repr=False, eq=False, kw_only=kw_only)

        return make if given is None else make(given)

    module = inspect.getmodule(cls)
    namespace = dict(vars(module)) | {"record": reference}
    exec(compile(inspect.getsource(cls), inspect.getfile(cls), "exec"), namespace)  # noqa: S102
    made: type = namespace[cls.__name__]
    return made


def _described(cls: type) -> list[object]:
    def named(value: object) -> object:  # the same value of another definition of the class: by kind
        shown = getattr(value, "__qualname__", None) or repr(value)
        return type(value).__qualname__ if " at 0x" in shown else shown

    fields = cls.__dataclass_fields__.values()  # type: ignore[attr-defined]
    return [
        [(f.name, f.type, named(f.default), named(f.default_factory), f.init, f.repr, f.hash, f.compare,
          dict(f.metadata), f.kw_only, f._field_type) for f in fields],
        [(f.name, named(getattr(cls, f.name, "(none)"))) for f in fields],
        cls.__match_args__,  # type: ignore[attr-defined]
        repr(cls.__dataclass_params__),  # type: ignore[attr-defined]
        cls.__doc__,
    ]  # fmt: skip


def test_every_record_has_the_fields_dataclasses_would_find() -> None:
    records = _records()
    assert len(records) > 100
    for cls in records:
        assert _described(cls) == _described(_as_dataclasses_makes_it(cls)), cls.__qualname__


def test_what_dataclasses_refuses_a_record_refuses() -> None:
    with pytest.raises(ValueError, match="mutable default <class 'list'> for field tags"):

        @record
        class Mutable:
            tags: list[str] = []  # noqa: RUF012

    with pytest.raises(TypeError, match="'loose' is a field but has no type annotation"):

        @record
        class Loose:
            loose = field(default=1)


def test_a_class_var_is_no_field_of_a_record() -> None:
    @record
    class Counted:
        made: ClassVar[int] = 0
        name: str

    assert [f.name for f in dataclasses.fields(Counted)] == ["name"]
    assert Counted("a").name == "a"
