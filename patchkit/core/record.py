"""Records: keyword-only dataclasses <-> JSON data, through one converter driven by type hints.

Every file patchkit writes or reads (build-info.json, the release and runtime manifests,
the provenance statement, refresh state, the recipe's TOML tables) is a dataclass whose
field types say what the file holds; :func:`decode` checks JSON data against them and
builds the record, :func:`encode` gives the JSON form back, and :func:`canonical_json`
is the one canonical serialisation of the files whose bytes are compared (manifests,
provenance). A renamed or retyped field is therefore a mypy error at every use, and a
file that does not fit is one :class:`RecordError` naming the dotted key.

Supported field types: ``str``, ``int`` (a ``bool`` is not an int), ``float`` (an int is
accepted and becomes a float), ``bool``, ``None`` / ``X | None``, unions of those scalars
(``int | float`` keeps what the file says), ``pathlib.Path`` (a string), ``tuple[T, ...]``, ``list[T]``,
``Mapping[str, T]`` / ``dict[str, T]``, :class:`enum.Enum` (by value, e.g. ``StrEnum``),
nested record dataclasses, and ``Any`` (any JSON value, taken as it is).

What today's formats need beyond the types is per-field metadata (:func:`meta`):

- ``key``: the JSON key when it is not the field name (``_type``, ``predicateType``);
- ``omit``: leave the key out when the value is ``None`` (``"none"``) or empty
  (``"empty"``: None, ``""``, an empty tuple, list or mapping), so files written before
  the field existed stay as they were;
- ``encode`` / ``decode``: a custom form (``ProtoVersion`` <-> ``"5.1.0"``, seconds
  rounded to 2 places); ``decode`` raises ValueError/TypeError for a bad value;
- ``check``: a predicate the decoded value must pass (a build number is positive);
- ``absent``: the value a file without the key gets, where the constructor has no
  default (code that makes the record must say it; files from older versions may lack it);
- ``required``: the key must be in the file although the constructor has a default;
- ``written=False``: the field is not written (a derived key carries it in another form:
  bench.json's ``path`` holds two of a point's fields in other units).

Decoding rules: a key not in the file takes the field's default (a missing key without
a default is an error); ``null`` is None where the type allows it, else the default,
else an error; keys the record does not know are ignored (``unknown="forbid"``: an
error naming the key and the keys allowed there, for files people write: recipes).

Why hand-written rather than cattrs, msgspec or pydantic: the files already written
(old build-infos, old releases that must still verify and rebuild byte for byte) fix
the exact key sets, the omitted keys, None versus missing and the number forms, which
here are plain per-field metadata instead of a library's hooks and settings; JSON types
are strict (no str -> int coercion, no bool as int); every error is the project's one
line naming the dotted key (``upstream.commit``, ``patches[0].result``), which recipes
render as "must be str, not int 5" and build-info as "is missing or not the expected
type"; and it adds no runtime dependency to a tool that builds from a bare checkout.
It imports nothing of patchkit (``core``).
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import enum
import functools
import inspect
import io
import json
import pathlib
import textwrap
import tokenize
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeAlias, TypeVar, Union

__all__ = [
    "JsonValue",
    "Meta",
    "Record",
    "RecordError",
    "canonical_json",
    "decode",
    "encode",
    "field_docs",
    "json_keys",
    "key_list",
    "meta",
]

JsonValue: TypeAlias = "bool | int | float | str | list[JsonValue] | dict[str, JsonValue] | None"

R = TypeVar("R")
_META = "patchkit.record"
_UNSET: Any = object()
Problem = Literal["missing", "type", "unknown"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Meta:
    """How one field is written and read (see the module doc)."""

    key: str | None = None
    omit: Literal["none", "empty"] | None = None
    encode: Callable[[Any], JsonValue] | None = None
    decode: Callable[[JsonValue], Any] | None = None
    check: Callable[[Any], bool] | None = None
    absent: Any = _UNSET
    required: bool = False
    written: bool = True


def meta(
    *,
    key: str | None = None,
    omit: Literal["none", "empty"] | None = None,
    encode: Callable[[Any], JsonValue] | None = None,
    decode: Callable[[JsonValue], Any] | None = None,
    check: Callable[[Any], bool] | None = None,
    absent: Any = _UNSET,
    required: bool = False,
    written: bool = True,
) -> dict[str, Meta]:
    """``dataclasses.field(metadata=meta(...))``."""
    return {
        _META: Meta(
            key=key,
            omit=omit,
            encode=encode,
            decode=decode,
            check=check,
            absent=absent,
            required=required,
            written=written,
        )
    }


class RecordError(ValueError):
    """Data that does not fit a record: ``path`` is the exact place (``cuda.archs[1]``),
    ``key`` the key it belongs to (``cuda.archs``: a plain value in a list is named by its
    list; a record in a list by its index, ``patches[0]``), ``problem`` what is wrong
    ("missing", "type": wrong type or a bad value, "unknown": a key the record does not
    have), ``value`` the value found, ``expected`` the type wanted ("str", "list",
    "dict", "str or int"), ``allowed`` the keys a record has (for "unknown")."""

    def __init__(
        self,
        path: str,
        problem: Problem,
        *,
        key: str | None = None,
        value: Any = None,
        expected: str = "",
        allowed: tuple[str, ...] = (),
    ) -> None:
        self.path = path or "(whole)"
        self.key = key or self.path
        self.problem: Problem = problem
        self.value = value
        self.expected = expected
        self.allowed = allowed
        super().__init__(self.message)

    @property
    def message(self) -> str:
        if self.problem == "unknown":
            return f"{self.path} is not a known key"
        return f"{self.key} is missing or not the expected type"

    def named_by(self, key: str) -> RecordError:
        return RecordError(
            self.path,
            self.problem,
            key=key,
            value=self.value,
            expected=self.expected,
            allowed=self.allowed,
        )


class Record:
    """A mixin for record dataclasses: ``to_json()`` is :func:`encode`.

    A record may name properties whose values its JSON form carries too (never read
    back): ``json_derived: ClassVar[tuple[str, ...]] = ("checksum_ok",)``; an entry
    ``(key, property)`` writes a property under another key.
    """

    json_derived: typing.ClassVar[tuple[str | tuple[str, str], ...]] = ()

    def to_json(self) -> dict[str, Any]:
        return encode(self)


# -- the fields of a record ------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Field:
    name: str
    key: str
    hint: Any
    meta: Meta
    has_default: bool  # a file may lack the key: the constructor's default or ``absent``
    nullable: bool


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (Union, types.UnionType)


def _nullable(tp: Any) -> bool:
    return tp is Any or tp is type(None) or (_is_union(tp) and type(None) in typing.get_args(tp))


@functools.cache
def _fields(cls: type) -> tuple[_Field, ...]:
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls.__name__} is not a dataclass")
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        m = f.metadata.get(_META) or Meta()
        has_default = not m.required and (
            m.absent is not _UNSET
            or f.default is not dataclasses.MISSING
            or f.default_factory is not dataclasses.MISSING
        )
        hint = hints[f.name]
        out.append(_Field(f.name, m.key or f.name, hint, m, has_default, _nullable(hint)))
    return tuple(out)


# -- decoding ------------------------------------------------------------------------------


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _is_record(tp: Any) -> bool:
    if _is_union(tp):
        return any(_is_record(a) for a in typing.get_args(tp) if a is not type(None))
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _type_name(tp: Any) -> str:
    if _is_union(tp):
        return " or ".join(_type_name(a) for a in typing.get_args(tp) if a is not type(None))
    origin = typing.get_origin(tp) or tp
    if origin in (tuple, list):
        return "list"
    if origin in (dict, Mapping) or _is_record(tp):
        return "dict"
    if isinstance(origin, type) and issubclass(origin, enum.Enum):
        return "str"
    return getattr(origin, "__name__", str(origin))


def _bad(tp: Any, value: Any, path: str) -> RecordError:
    return RecordError(path, "type", value=value, expected=_type_name(tp))


def decode(cls: type[R], data: Any, *, unknown: Literal["ignore", "forbid"] = "ignore", path: str = "") -> R:
    """The record ``cls`` from JSON data (or TOML tables); RecordError if it does not fit.
    ``path``: where ``data`` sits in a larger document (for the error's dotted key)."""
    out: R = _decode(cls, data, path, unknown)
    return out


def _decode(tp: Any, value: Any, path: str, unknown: str) -> Any:
    if tp is Any:
        return value
    if tp is type(None):
        if value is not None:
            raise _bad(tp, value, path)
        return None
    if _is_union(tp):
        return _decode_union(tp, value, path, unknown)
    origin = typing.get_origin(tp)
    if origin in (tuple, list):
        return _decode_sequence(tp, origin, value, path, unknown)
    if origin in (dict, Mapping):
        return _decode_mapping(tp, value, path, unknown)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _decode_record(tp, value, path, unknown)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(value)
        except ValueError:
            raise _bad(tp, value, path) from None
    if tp is bool:
        if not isinstance(value, bool):
            raise _bad(tp, value, path)
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _bad(tp, value, path)
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _bad(tp, value, path)
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise _bad(tp, value, path)
        return value
    if tp is pathlib.Path:
        if not isinstance(value, str):
            raise _bad(tp, value, path)
        return pathlib.Path(value)
    raise TypeError(f"{path}: the record converter does not support {tp!r}")


def _decode_union(tp: Any, value: Any, path: str, unknown: str) -> Any:
    args = typing.get_args(tp)
    if value is None and type(None) in args:
        return None
    rest = [a for a in args if a is not type(None)]
    if len(rest) == 1:
        return _decode(rest[0], value, path, unknown)
    for a in rest:  # scalars, in the order written (``int | float`` keeps an int an int)
        try:
            return _decode(a, value, path, unknown)
        except RecordError:
            continue
    raise _bad(tp, value, path)


def _decode_sequence(tp: Any, origin: Any, value: Any, path: str, unknown: str) -> Any:
    args = typing.get_args(tp)
    if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
        raise TypeError(f"{path}: only tuple[T, ...] is supported, not {tp!r}")
    if not isinstance(value, list):
        raise _bad(tp, value, path)
    elem = args[0]
    named_by_list = not _is_record(elem)
    items = []
    for i, v in enumerate(value):
        try:
            items.append(_decode(elem, v, f"{path}[{i}]", unknown))
        except RecordError as e:
            raise e.named_by(path) if named_by_list else e from None
    return tuple(items) if origin is tuple else items


def _decode_mapping(tp: Any, value: Any, path: str, unknown: str) -> dict[str, Any]:
    key_type, elem = typing.get_args(tp)
    if key_type is not str:
        raise TypeError(f"{path}: mapping keys must be str, not {key_type!r}")
    if not isinstance(value, dict):
        raise _bad(tp, value, path)
    out = {}
    for k, v in value.items():
        if not isinstance(k, str):
            raise RecordError(path, "type", value=k, expected="str")
        out[k] = _decode(elem, v, _join(path, k), unknown)
    return out


def _decode_record(cls: type, value: Any, path: str, unknown: str) -> Any:
    if not isinstance(value, dict):
        raise _bad(cls, value, path)
    fields = _fields(cls)
    if unknown == "forbid":
        keys = tuple(f.key for f in fields)
        for k in value:
            if k not in keys:
                raise RecordError(_join(path, str(k)), "unknown", value=k, allowed=keys)
    kwargs: dict[str, Any] = {}
    for f in fields:
        where = _join(path, f.key)
        raw = value.get(f.key)
        if f.key not in value or (raw is None and not f.nullable):
            # null where None is no value: not set (older files wrote null for it)
            if not f.has_default:
                if f.key not in value:
                    raise RecordError(where, "missing", expected=_type_name(f.hint))
                raise _bad(f.hint, raw, where)
            if f.meta.absent is not _UNSET:
                kwargs[f.name] = copy.copy(f.meta.absent)  # never one dict shared by records
            continue
        if raw is None:
            decoded = None
        elif f.meta.decode is not None:
            try:
                decoded = f.meta.decode(raw)
            except (ValueError, TypeError):
                raise _bad(f.hint, raw, where) from None
        else:
            decoded = _decode(f.hint, raw, where, unknown)
        if f.meta.check is not None and not f.meta.check(decoded):
            raise _bad(f.hint, raw, where)
        kwargs[f.name] = decoded
    return cls(**kwargs)


# -- encoding ------------------------------------------------------------------------------


def _empty(value: Any) -> bool:
    return value is None or (isinstance(value, (str, tuple, list, Mapping)) and len(value) == 0)


def encode(record: Any) -> dict[str, Any]:
    """The JSON form of a record (plain dicts, lists and scalars; keys in field order)."""
    if not dataclasses.is_dataclass(record) or isinstance(record, type):
        raise TypeError(f"{type(record).__name__} is not a record")
    out: dict[str, Any] = {}
    for f in _fields(type(record)):
        value = getattr(record, f.name)
        if not f.meta.written:
            continue
        if (f.meta.omit == "none" and value is None) or (f.meta.omit == "empty" and _empty(value)):
            continue
        if value is not None and f.meta.encode is not None:
            out[f.key] = f.meta.encode(value)
        else:
            out[f.key] = _encode(value)
    for key, name in _derived(type(record)):
        out[key] = _encode(getattr(record, name))
    return out


def _derived(cls: type) -> list[tuple[str, str]]:
    """(key, property) of each derived key of ``cls`` (:class:`Record`)."""
    return [(d, d) if isinstance(d, str) else d for d in getattr(cls, "json_derived", ())]


def _encode(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return encode(value)
    if isinstance(value, (tuple, list)):
        return [_encode(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _encode(v) for k, v in value.items()}
    if isinstance(value, pathlib.PurePath):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON data")


def canonical_json(value: Any) -> bytes:
    """The one canonical serialisation of a record or JSON data whose bytes are compared
    (manifests, provenance statements): sorted keys, two-space indent, UTF-8 as is, one
    trailing newline. ``verify`` re-serialises what it reads and compares bytes."""
    data = encode(value) if dataclasses.is_dataclass(value) and not isinstance(value, type) else value
    return (json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()


# -- the keys of a record's JSON form, with their docs ---------------------------------------


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """Each field's doc, by field name: the string right after the field in the class body
    (as scikit-build-core documents its settings), else the comment ending the field's
    line; a derived key's (``json_derived``): its property's docstring. One line each."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            source = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):  # no source (a class made at run time)
            continue
        comments = {
            t.start[0]: t.string.lstrip("#").strip()
            for t in tokenize.generate_tokens(io.StringIO(source).readline)
            if t.type == tokenize.COMMENT
        }
        body = typing.cast(ast.ClassDef, ast.parse(source).body[0]).body
        for node, after in zip(body, [*body[1:], None]):
            if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
                continue
            if (
                isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                docs[node.target.id] = " ".join(after.value.value.split())
            elif node.end_lineno in comments:
                docs[node.target.id] = comments[node.end_lineno]
    for key, name in _derived(cls):
        doc = inspect.getdoc(getattr(cls, name, None))
        if doc:
            docs[key] = " ".join(doc.split())
    return docs


def _inner_record(tp: Any) -> tuple[type, str] | None:
    """The record type inside a field's type and how its keys are reached: ``R`` / ``R |
    None`` (``.``), ``tuple[R, ...]`` / ``list[R]`` (``[].``), ``Mapping[str, R]`` (``{}.``)."""
    if _is_union(tp):
        rest = [a for a in typing.get_args(tp) if a is not type(None)]
        return _inner_record(rest[0]) if len(rest) == 1 else None
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (tuple, list) and args and _is_record(args[0]):
        return args[0], "[]."
    if origin in (dict, Mapping) and len(args) == 2 and _is_record(args[1]):
        return args[1], "{}."
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return tp, "."
    return None


def json_keys(cls: type, *, prefix: str = "") -> list[tuple[str, str]]:
    """Every key of ``cls``'s JSON form, nested records' keys dotted (``edits[].file``),
    with its doc (:func:`field_docs`), sorted as ``--json`` sorts them."""
    docs = field_docs(cls)
    out: list[tuple[str, str]] = []
    for f in _fields(cls):
        if not f.meta.written:
            continue
        key = prefix + f.key
        out.append((key, docs.get(f.name, "")))
        inner = _inner_record(f.hint) if f.meta.encode is None else None
        if inner is not None:
            out += json_keys(inner[0], prefix=key + inner[1])
    out += [(prefix + key, docs.get(key, "")) for key, _ in _derived(cls)]
    return sorted(out)


def key_list(cls: type, *, width: int = 96) -> str:
    """The keys of ``cls``'s JSON form as a list for a docstring or README: one item per key
    (``- ``key``: doc``), wrapped at ``width``. A command's docstring carries this text and
    a test keeps the two equal, so the documented keys cannot drift from the records."""
    lines: list[str] = []
    for key, doc in json_keys(cls):
        item = f"- ``{key}``" + (f": {doc}" if doc else "")
        lines += textwrap.wrap(item, width=width, subsequent_indent="  ", break_on_hyphens=False)
    return "\n".join(lines)
