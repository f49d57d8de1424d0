"""Folded figures as plain data and back: numbers, strings, lists and string-keyed objects, nothing that names code.

A snapshot of a run's fold travels with its results folder (a CI artifact, a run handed to a
colleague), so reading one must never run what it says. The shape of the data therefore comes
from the code, never from the data: `from_plain(data, kind)` walks `kind`'s type annotations
(dataclass fields, containers, scalars) and takes from `data` only values of the type each
annotation names; a value of another type, a missing or extra field, is `NotPlain`. The classes
built are the ones the annotations name, through their own constructors; a class that is not a
dataclass (a sketch) declares its own plain form with `as_plain()` and a `from_plain()` that
checks it. Nothing in the data is ever looked up as a name.

A mapping whose keys are not strings becomes a list of [key, value] pairs; a float that is not
finite becomes the string "inf", "-inf" or "nan". A dataclass field whose metadata says
`TRANSIENT` (a cache, a live probe) is left out and rebuilt by its default.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from collections import Counter
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
TRANSIENT = {"plain": False}
"""A dataclass field's metadata for what is not part of its plain form (rebuilt by the field's default)."""

_Code = Callable[[Any], Any]
_NOT_FINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


class NotPlain(ValueError):
    """Data that is not the plain form of the type asked for (or a value that has none)."""


def to_plain(value: Any, kind: Any) -> Any:
    """`value`, of type `kind`, as plain data (JSON's types); `NotPlain` when it does not fit `kind`."""
    return _codec(kind)[0](value)


def from_plain(data: Any, kind: type[T]) -> T:
    """The `kind` that `data` is the plain form of; `NotPlain` (saying where) when it is not one."""
    annotation: Any = kind
    return typing.cast(T, _codec(annotation)[1](data))


@functools.cache
def _codec(kind: Any) -> tuple[_Code, _Code]:
    """(encode, decode) for an annotation, built once per annotation."""
    if kind is Any:
        return _any, _any
    if kind in _SCALARS:
        return _SCALARS[kind]
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        return _union([_codec(arg) for arg in args])
    if origin is list:
        return _list(_codec(args[0]))
    if origin is tuple:
        return _tuple([_codec(arg) for arg in args] if args[-1] is not Ellipsis else None, _codec(args[0]))
    if origin in (dict, Counter):
        key, value = (args[0], int) if origin is Counter else args
        return _mapping(origin, key, _codec(key), _codec(value))
    if dataclasses.is_dataclass(kind):
        return _dataclass(typing.cast(type, kind))
    if isinstance(kind, type) and hasattr(kind, "from_plain") and hasattr(kind, "as_plain"):
        return _own(kind)
    raise TypeError(f"{kind!r} has no plain form")


def _fail(what: str, value: Any) -> NotPlain:
    return NotPlain(f"{type(value).__name__} where {what} belongs")


def _exact(kind: type, *also: type) -> tuple[_Code, _Code]:
    accepted = (kind, *also)

    def code(value: Any) -> Any:
        if type(value) not in accepted:
            raise _fail(kind.__name__, value)
        return value

    return code, code


def _encode_float(value: Any) -> Any:
    if type(value) not in (float, int):
        raise _fail("a number", value)
    if math.isfinite(value):
        return value
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


def _decode_float(data: Any) -> Any:
    if type(data) in (float, int):
        return data
    if type(data) is str and data in _NOT_FINITE:
        return _NOT_FINITE[data]
    raise _fail("a number", data)


_SCALARS: dict[Any, tuple[_Code, _Code]] = {
    int: _exact(int, bool), bool: _exact(bool), str: _exact(str), type(None): _exact(type(None)),
    float: (_encode_float, _decode_float),
}


def _any(value: Any) -> Any:
    """Free-form data (a record's detail, a chaos action): JSON's own types only, finite numbers, string keys."""
    kind = type(value)
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str:
                raise _fail("a string key", key)
            _any(item)
    elif kind is list:
        for item in value:
            _any(item)
    elif kind is float and not math.isfinite(value):
        raise NotPlain("a number that is not finite in free-form data")
    elif kind not in (str, int, bool, type(None), float):
        raise _fail("JSON data", value)
    return value


def _union(choices: list[tuple[_Code, _Code]]) -> tuple[_Code, _Code]:
    def pick(value: Any, side: int) -> Any:
        for choice in choices:
            try:
                return choice[side](value)
            except NotPlain:
                continue
        raise _fail("one of a union", value)

    return (lambda value: pick(value, 0)), (lambda data: pick(data, 1))


def _list(item: tuple[_Code, _Code]) -> tuple[_Code, _Code]:
    encode, decode = item

    def to(value: Any) -> Any:
        if type(value) is not list:
            raise _fail("a list", value)
        return [encode(one) for one in value]

    def back(data: Any) -> Any:
        if type(data) is not list:
            raise _fail("a list", data)
        return [decode(one) for one in data]

    return to, back


def _tuple(items: list[tuple[_Code, _Code]] | None, each: tuple[_Code, _Code]) -> tuple[_Code, _Code]:
    """A fixed tuple (`items`) or one of any length whose items are all `each`."""
    def codes(length: int) -> list[tuple[_Code, _Code]]:
        if items is None:
            return [each] * length
        if length != len(items):
            raise NotPlain(f"{length} items where {len(items)} belong")
        return items

    def to(value: Any) -> Any:
        if type(value) is not tuple:
            raise _fail("a tuple", value)
        return [code[0](one) for code, one in zip(codes(len(value)), value, strict=True)]

    def back(data: Any) -> Any:
        if type(data) is not list:
            raise _fail("a list", data)
        return tuple(code[1](one) for code, one in zip(codes(len(data)), data, strict=True))

    return to, back


def _mapping(kind: Any, key_type: Any, key: tuple[_Code, _Code], value: tuple[_Code, _Code]
             ) -> tuple[_Code, _Code]:
    """A dict or Counter: a JSON object when its keys are strings, else a list of [key, value] pairs."""
    as_object = key_type is str

    def to(value_: Any) -> Any:
        if type(value_) is not kind:
            raise _fail(kind.__name__, value_)
        if as_object:
            return {key[0](k): value[0](v) for k, v in value_.items()}
        return [[key[0](k), value[0](v)] for k, v in value_.items()]

    def back(data: Any) -> Any:
        built = kind()
        if as_object:
            if type(data) is not dict:
                raise _fail("an object", data)
            for k, v in data.items():
                built[k] = value[1](v)
            return built
        if type(data) is not list:
            raise _fail("a list of pairs", data)
        for pair in data:
            if type(pair) is not list or len(pair) != 2:
                raise _fail("a [key, value] pair", pair)
            k = key[1](pair[0])
            if k in built:
                raise NotPlain(f"the key {k!r} twice")
            built[k] = value[1](pair[1])
        return built

    return to, back


def _dataclass(kind: type) -> tuple[_Code, _Code]:
    """A JSON object with exactly the dataclass's fields (the transient ones aside), built by its constructor."""
    hints = typing.get_type_hints(kind)
    kept = [field for field in dataclasses.fields(kind) if field.metadata.get("plain", True)]
    codes = {field.name: _codec(hints[field.name]) for field in kept}
    names = set(codes)
    late = {field.name for field in kept if not field.init}

    def to(value: Any) -> Any:
        if type(value) is not kind:
            raise _fail(kind.__name__, value)
        plain = {}
        for name, code in codes.items():
            try:
                plain[name] = code[0](getattr(value, name))
            except NotPlain as exc:
                raise NotPlain(f"{kind.__name__}.{name}: {exc}") from None
        return plain

    def back(data: Any) -> Any:
        if type(data) is not dict or data.keys() != names:
            raise NotPlain(f"not the fields of {kind.__name__}")
        values = {}
        for name, code in codes.items():
            try:
                values[name] = code[1](data[name])
            except NotPlain as exc:
                raise NotPlain(f"{kind.__name__}.{name}: {exc}") from None
        built = kind(**{name: value for name, value in values.items() if name not in late})
        for name in late:
            object.__setattr__(built, name, values[name])
        return built

    return to, back


def _own(kind: Any) -> tuple[_Code, _Code]:
    """A class that declares its plain form itself (`as_plain`, and a `from_plain` that checks it)."""
    def to(value: Any) -> Any:
        if type(value) is not kind:
            raise _fail(kind.__name__, value)
        return value.as_plain()

    def back(data: Any) -> Any:
        try:
            return kind.from_plain(data)
        except NotPlain as exc:
            raise NotPlain(f"{kind.__name__}: {exc}") from None

    return to, back
