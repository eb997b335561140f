"""``@record``: a frozen dataclass whose methods are written once, here, instead of generated for each class.

Defining a ``@dataclass(frozen=True)`` compiles six methods of source text for that class (``__init__``,
``__repr__``, ``__eq__``, ``__hash__``, ``__setattr__``, ``__delattr__``): about 1 ms for a record of a dozen
fields, paid by every process that imports it, and the command's start-up defined twenty of them. A ``@record``
is a dataclass all the same (``dataclasses.fields``, ``replace``, ``asdict``, ``is_dataclass``, pattern matching,
``FrozenInstanceError``), whose fields are found by ``dataclasses.dataclass`` with nothing generated, and whose
methods are the generic ones below, driven by those fields: about 50 microseconds a class. Type checkers see it
as the frozen dataclass it is (:func:`typing.dataclass_transform`).

What differs from a generated dataclass: an instance takes a few microseconds more to build (records are made a
few per run, never per file), and an instance has a ``__dict__`` (no slots), so pickle needs nothing of its own.

Finding the fields is this module's too (:func:`_fields`). ``dataclasses.dataclass`` reads each annotation three
times over (is it a ``ClassVar``, an ``InitVar``, ``KW_ONLY``?), matching a regular expression against the string
and looking the name up in the class's module: a field cost 50,000 instructions, three quarters of a record, and
the command's start-up makes 46 records of 326 fields (about 15 million instructions, a twentieth of the process).
A record's fields are found as dataclasses finds them, in one pass, from the same ``Field`` objects: the kind of
field, the one name dataclasses keeps private, is taken from a field dataclasses made itself. A class whose fields
need more (a ``ClassVar``, an ``InitVar``, ``KW_ONLY``, a dataclass base) is left to ``dataclasses.dataclass``
whole; tests/unit/test_record.py holds every record of the package to what dataclasses finds.
"""

from __future__ import annotations

import dataclasses
import inspect  # dataclasses imports it anyway
from collections.abc import Callable
from dataclasses import MISSING, FrozenInstanceError, field
from typing import TYPE_CHECKING, Any, TypeVar, overload

if TYPE_CHECKING:
    from typing_extensions import dataclass_transform
else:
    from typing import dataclass_transform

__all__ = ["field", "record"]

T = TypeVar("T", bound=type)


class _Field:
    """One ``__init__`` parameter (or a field set without one)."""

    __slots__ = ("default", "factory", "keyword_only", "name")

    def __init__(self, f: dataclasses.Field[Any]) -> None:
        self.name, self.keyword_only = f.name, bool(f.kw_only)
        #: Its value when it is not given: a constant, or ``factory()``; both MISSING: required.
        self.default: Any = f.default
        self.factory: Any = f.default_factory


class _Spec:
    """What the generic methods need of a record class, worked out once when the class is made. (Plain classes
    here: a NamedTuple costs start-up more than the record it describes.)"""

    __slots__ = ("compared", "derived", "hashed", "init", "name", "names", "positional", "shown")

    def __init__(self, cls: type) -> None:
        self.name = cls.__qualname__
        parameters: list[dataclasses.Field[Any]] = []
        derived: list[_Field] = []
        compared: list[str] = []
        hashed: list[str] = []
        shown: list[str] = []
        for f in dataclasses.fields(cls):  # one pass: a record is made by every process that imports it
            if f.init:
                parameters.append(f)
            elif f.default is not MISSING or f.default_factory is not MISSING:
                derived.append(_Field(f))
            if f.compare:
                compared.append(f.name)
            if f.compare if f.hash is None else f.hash:
                hashed.append(f.name)
            if f.repr:
                shown.append(f.name)
        parameters.sort(key=_keyword)  # positional ones first, as Python orders parameters (a stable sort)
        #: The ``__init__`` parameters, positional ones first, in the order of the fields.
        self.init = tuple(map(_Field, parameters))
        self.positional = sum(not f.kw_only for f in parameters)
        self.names = frozenset(f.name for f in parameters)
        #: The fields set without a parameter (``field(init=False)``) that have a default.
        self.derived = tuple(derived)
        self.compared, self.hashed, self.shown = tuple(compared), tuple(hashed), tuple(shown)


def _keyword(f: dataclasses.Field[Any]) -> bool:
    return bool(f.kw_only)


def _parameters(cls: type) -> list[dataclasses.Field[Any]]:
    """The fields ``__init__`` takes, in Python's order of parameters: positional ones first (a stable sort)."""
    return sorted((f for f in dataclasses.fields(cls) if f.init), key=_keyword)


@overload
def record(cls: T, /) -> T: ...
@overload
def record(*, kw_only: bool = False, frozen: bool = True) -> Callable[[T], T]: ...
@dataclass_transform(frozen_default=True, field_specifiers=(field,))
def record(cls: T | None = None, /, *, kw_only: bool = False, frozen: bool = True) -> T | Callable[[T], T]:
    """Make ``cls`` a frozen dataclass (keyword-only fields with ``kw_only=True``; ``frozen=False``: one whose
    fields may be assigned, and so not hashable), as described above."""

    def make(cls: T) -> T:
        cls.__signature__ = _SIGNATURE  # type: ignore[attr-defined]  # dataclass() asks for it without a docstring
        written = inspect.get_annotations(cls)
        if _plain(cls, written):
            _fields(cls, written, kw_only)
        else:
            dataclasses.dataclass(cls, init=False, repr=False, eq=False, kw_only=kw_only)
        cls.__record__ = _Spec(cls)  # type: ignore[attr-defined]
        if "__init__" not in cls.__dict__:
            cls.__init__ = _init  # type: ignore[misc]
        cls.__repr__ = _repr  # type: ignore[assignment]
        cls.__eq__ = _eq  # type: ignore[assignment]
        if frozen:
            cls.__hash__ = _hash  # type: ignore[assignment]
            cls.__setattr__ = _frozen_set  # type: ignore[assignment]
            cls.__delattr__ = _frozen_delete  # type: ignore[assignment]
        else:
            cls.__hash__ = None  # type: ignore[assignment]
        return cls

    return make if cls is None else make(cls)


def _plain(cls: type, written: dict[str, Any]) -> bool:
    """Whether ``cls``'s fields are found by :func:`_fields`: no annotation names a ``ClassVar``, an ``InitVar`` or
    ``KW_ONLY``, and no base is a dataclass."""
    if len(cls.__mro__) > 2 and any(hasattr(base, "__dataclass_fields__") for base in cls.__mro__[1:]):
        return False
    annotations = list(written.values())
    if not all(isinstance(a, str) for a in annotations):
        return False
    text = " ".join(annotations)
    return "ClassVar" not in text and "InitVar" not in text and "KW_ONLY" not in text


@dataclasses.dataclass(init=False, repr=False, eq=False)
class _Made:
    """A class dataclasses made: its parameters and the kind of its field are a record's."""

    made: int


#: The kind of a field (dataclasses' ``_FIELD``), as dataclasses marks it.
_KIND = _Made.__dataclass_fields__["made"]._field_type  # type: ignore[attr-defined]


def _fields(cls: type, written: dict[str, Any], kw_only: bool) -> None:
    """Make ``cls`` a dataclass as ``dataclasses.dataclass(cls, init=False, repr=False, eq=False)`` does for a class
    :func:`_plain` says yes to: its fields from its annotations in order, each default or ``field()`` in the class
    made a ``Field`` (the class keeps a default, loses a ``field()`` without one), ``__match_args__`` and
    ``__dataclass_params__`` as a dataclass has them."""
    found: dict[str, dataclasses.Field[Any]] = {}
    for name, annotation in written.items():
        given: Any = getattr(cls, name, MISSING)  # as dataclasses reads it: a descriptor gives its own
        if isinstance(given, dataclasses.Field):
            each = given
            if each.default is MISSING:
                delattr(cls, name)
            else:
                setattr(cls, name, each.default)
        else:
            each = field(default=given)
        each.name, each.type = name, annotation
        each._field_type = _KIND  # type: ignore[attr-defined]
        if each.kw_only is MISSING:
            each.kw_only = kw_only
        if each.default.__class__.__hash__ is None:  # as dataclasses: unhashable stands for mutable
            raise ValueError(
                f"mutable default {type(each.default)} for field {name} is not allowed: use default_factory"
            )
        found[name] = each
    for name, value in cls.__dict__.items():
        if isinstance(value, dataclasses.Field) and name not in found:
            raise TypeError(f"{name!r} is a field but has no type annotation")
    cls.__dataclass_fields__ = found  # type: ignore[attr-defined]
    cls.__dataclass_params__ = _Made.__dataclass_params__  # type: ignore[attr-defined]
    if "__match_args__" not in cls.__dict__:
        positional = tuple(f.name for f in found.values() if f.init and not f.kw_only)
        cls.__match_args__ = positional  # type: ignore[attr-defined,misc]
    if cls.__doc__ is None:
        cls.__doc__ = cls.__name__ + str(inspect.signature(cls)).replace(" -> None", "")


def _init(self: Any, *args: Any, **kwargs: Any) -> None:
    spec: _Spec = type(self).__record__
    if len(args) > spec.positional:
        raise TypeError(
            f"{spec.name}() takes {spec.positional} positional arguments but {len(args)} were given"
        )
    for name in kwargs:
        if name not in spec.names:
            raise TypeError(f"{spec.name}() got an unexpected keyword argument '{name}'")
    set_field = object.__setattr__
    for index, each in enumerate(spec.init):
        if index < len(args):
            if each.name in kwargs:
                raise TypeError(f"{spec.name}() got multiple values for argument '{each.name}'")
            value = args[index]
        elif each.name in kwargs:
            value = kwargs[each.name]
        elif each.default is not MISSING:
            value = each.default
        elif each.factory is not MISSING:
            value = each.factory()
        else:
            raise TypeError(f"{spec.name}() missing required argument: '{each.name}'")
        set_field(self, each.name, value)
    for each in spec.derived:
        set_field(self, each.name, each.factory() if each.default is MISSING else each.default)
    post_init = getattr(self, "__post_init__", None)
    if post_init is not None:
        post_init()


def _repr(self: Any) -> str:
    spec: _Spec = type(self).__record__
    return f"{spec.name}({', '.join(f'{name}={getattr(self, name)!r}' for name in spec.shown)})"


def _eq(self: Any, other: Any) -> Any:
    if other.__class__ is not self.__class__:
        return NotImplemented
    return all(getattr(self, name) == getattr(other, name) for name in type(self).__record__.compared)


def _hash(self: Any) -> int:
    return hash(tuple(getattr(self, name) for name in type(self).__record__.hashed))


def _frozen_set(self: Any, name: str, value: object) -> None:
    raise FrozenInstanceError(f"cannot assign to field {name!r}")


def _frozen_delete(self: Any, name: str) -> None:
    raise FrozenInstanceError(f"cannot delete field {name!r}")


class _Signature:
    """``inspect.signature(cls)`` of a record (which ``help(cls)`` shows): its fields as ``__init__``'s
    parameters, worked out when asked."""

    def __get__(self, obj: object, owner: type) -> inspect.Signature:
        return inspect.Signature(
            [
                inspect.Parameter(
                    f.name,
                    inspect.Parameter.KEYWORD_ONLY if f.kw_only else inspect.Parameter.POSITIONAL_OR_KEYWORD,
                    default=(
                        f.default
                        if f.default is not MISSING
                        else _FACTORY
                        if f.default_factory is not MISSING
                        else inspect.Parameter.empty
                    ),
                    annotation=f.type,
                )
                for f in _parameters(owner)
            ]
        )


_SIGNATURE = _Signature()


class _Factory:
    """How a signature shows a default made by a factory (as a dataclass's does)."""

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY = _Factory()
