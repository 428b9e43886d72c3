"""A capped reader of a GGUF file's header and tensor table (never its data).

Everything read is bounded before it is believed: the counts of keys and tensors, each
string's and array's length, the number of dimensions, each dimension, the tensor type,
and every tensor's bytes and offset against the file's size. A file that breaks any of
them is one :class:`GgufError` line naming the key or tensor; a GGUF whose data region is
a hole (a model *shape*, ``truncate``-extended) reads like the real file.

Type sizes come from the ``gguf`` package's ``GGML_QUANT_SIZES`` (block elements, block
bytes), the same table llama.cpp's converter uses.
"""

from __future__ import annotations

import dataclasses
import itertools
import struct
from pathlib import Path
from typing import IO, Any

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from patchkit.core.errors import ConfigError

__all__ = ["ArrayInfo", "GgufError", "GgufHeader", "TensorInfo", "read_header", "tensor_nbytes"]

MAGIC = b"GGUF"
MAX_KV = 1 << 16
MAX_TENSORS = 1 << 20
MAX_STRING = 1 << 24  # a chat template is ~10 KiB; 16 MiB is far beyond any real key
MAX_ARRAY = 1 << 26  # vocabularies are ~10^5..10^6 entries
MAX_DIMS = 4  # GGML_MAX_DIMS
MAX_DIM = 1 << 40
KEEP_ARRAY = 4096  # arrays up to this many scalars are kept; longer ones only counted
MAX_HEADER = 1 << 30


class GgufError(ConfigError):
    """A GGUF file whose header or tensor table is malformed or lies about its sizes."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ArrayInfo:
    """A long array (a vocabulary): its element type and count, not its contents."""

    type: int
    count: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class TensorInfo:
    name: str
    dims: tuple[int, ...]  # ggml order: dims[0] is the row length
    type: int  # GGMLQuantizationType value
    offset: int  # relative to the data region
    nbytes: int

    @property
    def type_name(self) -> str:
        return GGMLQuantizationType(self.type).name


@dataclasses.dataclass(frozen=True, kw_only=True)
class GgufHeader:
    path: Path
    version: int
    kv: dict[str, Any]
    tensors: tuple[TensorInfo, ...]
    data_offset: int
    file_size: int

    @property
    def arch(self) -> str:
        a = self.kv.get("general.architecture")
        return a if isinstance(a, str) else ""

    def key(self, name: str, default: Any = None) -> Any:
        """``{arch}.name`` (or ``name`` when it is already a full key)."""
        if name in self.kv:
            return self.kv[name]
        return self.kv.get(f"{self.arch}.{name}", default)


def tensor_nbytes(dims: tuple[int, ...], ggml_type: int) -> int:
    """Bytes of a tensor of ``dims`` (ggml order) and type; its row length must be whole blocks."""
    block, size = GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
    n = 1
    for d in dims:
        n *= d
    if dims and dims[0] % block:
        raise ValueError(f"row length {dims[0]} is not a multiple of the block size {block}")
    return n // block * size


_SCALARS: dict[int, struct.Struct] = {
    0: struct.Struct("<B"),
    1: struct.Struct("<b"),
    2: struct.Struct("<H"),
    3: struct.Struct("<h"),
    4: struct.Struct("<I"),
    5: struct.Struct("<i"),
    6: struct.Struct("<f"),
    7: struct.Struct("<?"),
    10: struct.Struct("<Q"),
    11: struct.Struct("<q"),
    12: struct.Struct("<d"),
}
_STRING, _ARRAY = 8, 9
_U32, _U64 = struct.Struct("<I"), struct.Struct("<Q")


class _Reader:
    def __init__(self, f: IO[bytes], path: Path, size: int) -> None:
        self.f, self.path, self.size = f, path, size

    def fail(self, what: str) -> GgufError:
        return GgufError(
            f"{self.path}: not a usable GGUF: {what}",
            hint="re-download or re-convert the model; a shape file is written by `patchkit plan shape`",
        )

    def take(self, n: int, what: str) -> bytes:
        if self.f.tell() + n > min(self.size, MAX_HEADER):
            raise self.fail(f"{what} runs past the end of the file")
        b = self.f.read(n)
        if len(b) != n:
            raise self.fail(f"{what} runs past the end of the file")
        return b

    def u64(self, what: str) -> int:
        return int(_U64.unpack(self.take(8, what))[0])

    def string(self, what: str, *, keep: bool = True) -> str:
        n = self.u64(what)
        if n > MAX_STRING:
            raise self.fail(f"{what} is {n} bytes long (at most {MAX_STRING})")
        if not keep:
            if self.f.tell() + n > self.size:
                raise self.fail(f"{what} runs past the end of the file")
            self.f.seek(n, 1)
            return ""
        return self.take(n, what).decode("utf-8", errors="replace")

    def value(self, vtype: int, what: str) -> Any:
        if vtype in _SCALARS:
            s = _SCALARS[vtype]
            return s.unpack(self.take(s.size, what))[0]
        if vtype == _STRING:
            return self.string(what)
        if vtype == _ARRAY:
            etype = int(_U32.unpack(self.take(4, what))[0])
            count = self.u64(what)
            if count > MAX_ARRAY:
                raise self.fail(f"{what} has {count} elements (at most {MAX_ARRAY})")
            if etype == _ARRAY:
                raise self.fail(f"{what} is an array of arrays")
            if etype in _SCALARS:
                s = _SCALARS[etype]
                if count > KEEP_ARRAY:
                    if self.f.tell() + count * s.size > self.size:
                        raise self.fail(f"{what} runs past the end of the file")
                    self.f.seek(count * s.size, 1)
                    return ArrayInfo(type=etype, count=count)
                raw = self.take(count * s.size, what)
                return tuple(x[0] for x in s.iter_unpack(raw))
            if etype == _STRING:
                keep = count <= KEEP_ARRAY
                items = [self.string(f"{what}[{i}]", keep=keep) for i in range(count)]
                return tuple(items) if keep else ArrayInfo(type=etype, count=count)
            raise self.fail(f"{what} has unknown element type {etype}")
        raise self.fail(f"{what} has unknown value type {vtype}")


def read_header(path: Path) -> GgufHeader:
    """The header and tensor table of the GGUF at ``path``, every size checked."""
    try:
        size = path.stat().st_size
        f = path.open("rb")
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the model: {e.strerror or e}") from None
    with f:
        r = _Reader(f, path, size)
        if r.take(4, "the magic") != MAGIC:
            raise r.fail("it does not start with GGUF")
        version = int(_U32.unpack(r.take(4, "the version"))[0])
        if version not in (2, 3):
            raise r.fail(f"version {version} (this reader knows 2 and 3)")
        n_tensors, n_kv = r.u64("the tensor count"), r.u64("the key count")
        if n_tensors > MAX_TENSORS:
            raise r.fail(f"it claims {n_tensors} tensors (at most {MAX_TENSORS})")
        if n_kv > MAX_KV:
            raise r.fail(f"it claims {n_kv} keys (at most {MAX_KV})")
        kv: dict[str, Any] = {}
        for i in range(n_kv):
            key = r.string(f"key {i}'s name")
            vtype = int(_U32.unpack(r.take(4, f"key {key!r}'s type"))[0])
            kv[key] = r.value(vtype, f"key {key!r}")
        raw: list[tuple[str, tuple[int, ...], int, int]] = []
        for i in range(n_tensors):
            name = r.string(f"tensor {i}'s name")
            nd = int(_U32.unpack(r.take(4, f"tensor {name!r}'s dimension count"))[0])
            if not 1 <= nd <= MAX_DIMS:
                raise r.fail(f"tensor {name!r} has {nd} dimensions (1 to {MAX_DIMS})")
            dims = tuple(r.u64(f"tensor {name!r}'s dimensions") for _ in range(nd))
            if any(d > MAX_DIM for d in dims):
                raise r.fail(f"tensor {name!r} has a dimension above 2^40: {list(dims)}")
            ttype = int(_U32.unpack(r.take(4, f"tensor {name!r}'s type"))[0])
            offset = r.u64(f"tensor {name!r}'s offset")
            raw.append((name, dims, ttype, offset))
        align = kv.get("general.alignment", 32)
        if not isinstance(align, int) or align <= 0 or align & (align - 1) or align > 1 << 20:
            raise r.fail(f"general.alignment {align!r} is not a power of two up to 1 MiB")
        data_offset = (f.tell() + align - 1) // align * align
    tensors = _check_tensors(r, raw, align, size - data_offset)
    return GgufHeader(
        path=path, version=version, kv=kv, tensors=tensors, data_offset=data_offset, file_size=size
    )


def _check_tensors(
    r: _Reader, raw: list[tuple[str, tuple[int, ...], int, int]], align: int, data_size: int
) -> tuple[TensorInfo, ...]:
    seen: set[str] = set()
    out: list[TensorInfo] = []
    for name, dims, ttype, offset in raw:
        if name in seen:
            raise r.fail(f"tensor {name!r} appears twice")
        seen.add(name)
        try:
            GGMLQuantizationType(ttype)
            nbytes = tensor_nbytes(dims, ttype)
        except (ValueError, KeyError) as e:
            raise r.fail(f"tensor {name!r}: type {ttype}: {e}") from None
        if offset % align:
            raise r.fail(f"tensor {name!r} starts at {offset}, not a multiple of the alignment {align}")
        if data_size < 0 or offset + nbytes > data_size:
            raise r.fail(
                f"tensor {name!r} says {nbytes} bytes at offset {offset}, but the data region is "
                f"{max(data_size, 0)} bytes (the file is shorter than its tensor table says)"
            )
        out.append(TensorInfo(name=name, dims=dims, type=ttype, offset=offset, nbytes=nbytes))
    by_offset = sorted(out, key=lambda t: t.offset)
    for a, b in itertools.pairwise(by_offset):
        if a.nbytes and b.offset < a.offset + a.nbytes:
            raise r.fail(f"tensors {a.name!r} and {b.name!r} overlap")
    return tuple(out)
