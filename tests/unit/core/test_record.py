"""core.record: the one converter between record dataclasses and JSON data: every supported
type, every error with its dotted key, omitted keys, per-field metadata, round trips."""

from __future__ import annotations

import dataclasses
import json
import pathlib
import typing
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from patchkit.core.enums import StrEnum
from patchkit.core.record import (
    JsonValue,
    Record,
    RecordError,
    canonical_json,
    decode,
    encode,
    field_docs,
    json_keys,
    key_list,
    meta,
)


class Colour(StrEnum):
    RED = "red"
    BLUE = "blue"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Point(Record):
    x: int
    y: int = 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class Everything(Record):
    text: str
    count: int
    ratio: float
    flag: bool
    colour: Colour
    maybe: str | None
    number: int | float
    tags: tuple[str, ...]
    items: list[int]
    points: tuple[Point, ...]
    env: Mapping[str, str]
    table: dict[str, tuple[str, ...]]
    where: Point
    anything: Any
    nested: Point | None = None


FULL: dict[str, Any] = {
    "text": "t",
    "count": 3,
    "ratio": 0.5,
    "flag": True,
    "colour": "red",
    "maybe": None,
    "number": 7,
    "tags": ["a", "b"],
    "items": [1, 2],
    "points": [{"x": 1, "y": 2}],
    "env": {"A": "1"},
    "table": {"f": ["sm_60"]},
    "where": {"x": 5, "y": 0},
    "anything": {"free": [1, "form", None]},
    "nested": None,
}


def test_every_supported_type_reads_and_writes_back() -> None:
    r = decode(Everything, FULL)
    assert r.colour is Colour.RED and r.tags == ("a", "b") and r.items == [1, 2]
    assert r.points == (Point(x=1, y=2),) and r.where == Point(x=5)
    assert r.table == {"f": ("sm_60",)} and r.anything == {"free": [1, "form", None]}
    assert encode(r) == FULL and r.to_json() == FULL
    assert json.loads(json.dumps(encode(r))) == FULL  # plain JSON types only


def test_numbers_are_strict_json_types() -> None:
    r = decode(Everything, {**FULL, "ratio": 2, "number": 2.5})
    assert r.ratio == 2.0 and isinstance(r.ratio, float)  # an int is a float where a float is asked
    assert isinstance(r.number, float)
    assert isinstance(decode(Everything, FULL).number, int)  # int | float keeps what the file says
    for key, bad in (("count", True), ("count", 1.0), ("count", "3"), ("ratio", False), ("flag", 1)):
        with pytest.raises(RecordError) as e:
            decode(Everything, {**FULL, key: bad})
        assert (e.value.key, e.value.problem, e.value.value) == (key, "type", bad)


@pytest.mark.parametrize(
    ("edit", "path", "key", "problem", "expected"),
    [
        ({"text": 5}, "text", "text", "type", "str"),
        ({"colour": "green"}, "colour", "colour", "type", "str"),
        ({"maybe": 5}, "maybe", "maybe", "type", "str"),
        ({"number": "7"}, "number", "number", "type", "int or float"),
        ({"tags": "a"}, "tags", "tags", "type", "list"),
        ({"tags": ["a", 5]}, "tags[1]", "tags", "type", "str"),  # a plain value: named by its list
        ({"items": [1, None]}, "items[1]", "items", "type", "int"),
        ({"points": [{"x": 1}, {"x": "2"}]}, "points[1].x", "points[1].x", "type", "int"),
        ({"points": [{"x": 1}, 5]}, "points[1]", "points[1]", "type", "dict"),  # a record: its index
        ({"env": {"A": 1}}, "env.A", "env.A", "type", "str"),
        ({"env": ["A"]}, "env", "env", "type", "dict"),
        ({"table": {"f": ["sm_60", 60]}}, "table.f[1]", "table.f", "type", "str"),
        ({"where": {"y": 1}}, "where.x", "where.x", "missing", "int"),
        ({"where": None}, "where", "where", "type", "dict"),
        ({"nested": {"x": True}}, "nested.x", "nested.x", "type", "int"),
    ],
)
def test_each_error_names_its_dotted_key(
    edit: dict[str, Any], path: str, key: str, problem: str, expected: str
) -> None:
    with pytest.raises(RecordError) as e:
        decode(Everything, {**FULL, **edit})
    assert (e.value.path, e.value.key, e.value.problem, e.value.expected) == (path, key, problem, expected)
    assert str(e.value) == f"{key} is missing or not the expected type"


def test_missing_keys_nulls_and_the_whole() -> None:
    data = dict(FULL)
    del data["count"]
    with pytest.raises(RecordError, match=r"^count is missing or not the expected type$") as e:
        decode(Everything, data)
    assert e.value.problem == "missing"
    with pytest.raises(RecordError) as e:
        decode(Everything, {**FULL, "count": None})  # null where None is no value, no default
    assert (e.value.key, e.value.problem) == ("count", "type")
    with pytest.raises(RecordError) as e:
        decode(Everything, [FULL])
    assert e.value.key == "(whole)"
    with pytest.raises(RecordError) as e:
        decode(Point, {"x": "1"}, path="outer.points[2]")  # where it sits in a larger file
    assert e.value.key == "outer.points[2].x"


def test_defaults_for_missing_and_null_keys() -> None:
    assert decode(Point, {"x": 1}) == Point(x=1, y=0)
    assert decode(Point, {"x": 1, "y": None}) == Point(x=1, y=0)  # null: not set
    data = {k: v for k, v in FULL.items() if k != "nested"}
    assert decode(Everything, data).nested is None


def test_unknown_keys_are_ignored_or_refused() -> None:
    assert decode(Point, {"x": 1, "later": True}) == Point(x=1)
    with pytest.raises(RecordError) as e:
        decode(Everything, {**FULL, "where": {"x": 1, "z": 2}}, unknown="forbid")
    assert (e.value.path, e.value.problem, e.value.value) == ("where.z", "unknown", "z")
    assert e.value.allowed == ("x", "y")
    assert str(e.value) == "where.z is not a known key"


def _round2(v: float) -> float:
    return round(v, 2)


def _positive(n: int | None) -> bool:
    return n is None or n > 0


def _version(raw: JsonValue) -> tuple[int, ...]:
    if not isinstance(raw, str):
        raise TypeError(raw)
    return tuple(int(p) for p in raw.split("."))


@dataclasses.dataclass(frozen=True, kw_only=True)
class WithMeta(Record):
    kind: str = dataclasses.field(default="k", metadata=meta(key="_type"))
    seconds: float = dataclasses.field(default=0.0, metadata=meta(encode=_round2))
    note: str = dataclasses.field(default="", metadata=meta(omit="empty"))
    extras: tuple[str, ...] = dataclasses.field(default=(), metadata=meta(omit="empty"))
    number: int | None = dataclasses.field(default=None, metadata=meta(omit="none", check=_positive))
    version: tuple[int, ...] | None = dataclasses.field(
        default=None, metadata=meta(encode=lambda v: ".".join(map(str, v)), decode=_version)
    )
    file: str = dataclasses.field(metadata=meta(absent=""))
    table: Mapping[str, str] = dataclasses.field(metadata=meta(absent={}))
    counter: int = dataclasses.field(default=0, metadata=meta(required=True))


def test_field_metadata() -> None:
    m = WithMeta(seconds=1.23456, version=(5, 1, 0), file="f", table={}, counter=2)
    assert encode(m) == {
        "_type": "k",  # another JSON key
        "seconds": 1.23,  # a custom form
        "version": "5.1.0",
        "file": "f",
        "table": {},
        "counter": 2,
    }  # note, extras (empty) and number (None): left out
    assert decode(WithMeta, encode(m)) == dataclasses.replace(m, seconds=1.23)
    full = dataclasses.replace(m, note="n", extras=("e",), number=3)
    assert {"note", "extras", "number"} <= set(encode(full))
    assert decode(WithMeta, encode(full)) == dataclasses.replace(full, seconds=1.23)
    # absent: a file without the key gets it, the constructor still asks for it
    got = decode(WithMeta, {"counter": 0})
    assert (got.file, got.table) == ("", {})
    assert decode(WithMeta, {"counter": 0}).table is not got.table  # never one dict shared
    with pytest.raises(TypeError):
        WithMeta(counter=0)  # type: ignore[call-arg]
    # required: in the file although the constructor has a default
    with pytest.raises(RecordError) as e:
        decode(WithMeta, {})
    assert (e.value.key, e.value.problem) == ("counter", "missing")
    for bad, key in (({"number": 0}, "number"), ({"version": 5}, "version"), ({"version": "5.x"}, "version")):
        with pytest.raises(RecordError) as e:
            decode(WithMeta, {"counter": 0, **bad})
        assert (e.value.key, e.value.problem) == (key, "type")


def test_unsupported_types_are_programming_errors() -> None:
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Odd:
        pair: tuple[int, str]

    with pytest.raises(TypeError, match="only tuple"):
        decode(Odd, {"pair": [1, "a"]})
    with pytest.raises(TypeError, match="not a record"):
        encode({"a": 1})
    with pytest.raises(TypeError, match="not JSON data"):
        encode(Everything(**{**decode(Everything, FULL).__dict__, "anything": object()}))


def test_canonical_json_is_sorted_indented_utf8_with_one_newline() -> None:
    data = {"b": [1, {"d": "ü", "c": None}], "a": True}
    assert (
        canonical_json(data)
        == (
            '{\n  "a": true,\n  "b": [\n    1,\n    {\n      "c": null,\n      "d": "ü"\n    }\n  ]\n}\n'
        ).encode()
    )
    assert canonical_json(Point(x=1)) == canonical_json({"y": 0, "x": 1})


# -- round trips -------------------------------------------------------------------------------

_text = st.text(max_size=8)
_points = st.builds(Point, x=st.integers(-(1 << 40), 1 << 40), y=st.integers(-5, 5))
_everything = st.builds(
    Everything,
    text=_text,
    count=st.integers(),
    ratio=st.floats(allow_nan=False, allow_infinity=False),
    flag=st.booleans(),
    colour=st.sampled_from(Colour),
    maybe=st.none() | _text,
    number=st.integers() | st.floats(allow_nan=False, allow_infinity=False),
    tags=st.lists(_text, max_size=3).map(tuple),
    items=st.lists(st.integers(), max_size=3),
    points=st.lists(_points, max_size=3).map(tuple),
    env=st.dictionaries(_text, _text, max_size=3),
    table=st.dictionaries(_text, st.lists(_text, max_size=2).map(tuple), max_size=2),
    where=_points,
    anything=st.none() | st.integers() | _text,
    nested=st.none() | _points,
)


@given(_everything)
def test_property_decode_of_encode_is_the_record(r: Everything) -> None:
    data = encode(r)
    assert decode(Everything, json.loads(json.dumps(data))) == r
    assert canonical_json(decode(Everything, data)) == canonical_json(r)


# -- derived keys, paths, field docs and key lists ----------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Inner(Record):
    name: str  # the name
    size: int = 0
    """its size in bytes,
    over two lines"""


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Outer(Record):
    json_derived: typing.ClassVar[tuple[str, ...]] = ("total",)

    where: pathlib.Path  # a folder
    items: tuple[_Inner, ...] = ()  # what is in it
    extra: _Inner | None = None

    @property
    def total(self) -> int:
        """the sizes, summed"""
        return sum(i.size for i in self.items)


def test_a_derived_key_is_written_and_not_read_back() -> None:
    rec = _Outer(where=pathlib.Path("/x/y"), items=(_Inner(name="a", size=2), _Inner(name="b", size=3)))
    data = rec.to_json()
    assert data == {
        "where": "/x/y",
        "items": [{"name": "a", "size": 2}, {"name": "b", "size": 3}],
        "extra": None,
        "total": 5,
    }
    assert decode(_Outer, data) == rec  # "total" is ignored when read


def test_a_path_field_is_a_string_in_the_file() -> None:
    assert decode(_Outer, {"where": "rel/dir"}).where == pathlib.Path("rel/dir")
    with pytest.raises(RecordError, match="where is missing or not the expected type"):
        decode(_Outer, {"where": 3})


def test_field_docs_come_from_the_string_after_a_field_or_its_comment() -> None:
    assert field_docs(_Inner) == {"name": "the name", "size": "its size in bytes, over two lines"}
    assert field_docs(_Outer) == {"where": "a folder", "items": "what is in it", "total": "the sizes, summed"}


def test_json_keys_walk_nested_records_in_sorted_order() -> None:
    assert json_keys(_Outer) == [
        ("extra", ""),
        ("extra.name", "the name"),
        ("extra.size", "its size in bytes, over two lines"),
        ("items", "what is in it"),
        ("items[].name", "the name"),
        ("items[].size", "its size in bytes, over two lines"),
        ("total", "the sizes, summed"),
        ("where", "a folder"),
    ]
    assert (
        key_list(_Inner, width=30) == "- ``name``: the name\n- ``size``: its size in bytes,\n  over two lines"
    )
