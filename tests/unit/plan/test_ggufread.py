"""The capped GGUF header reader: real headers read back, lying ones refused in one line."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFWriter

from patchkit.core.errors import ConfigError
from patchkit.plan.ggufread import GgufError, read_header
from patchkit.plan.hfconfig import table_from_config, write_hole_gguf
from tests.unit.plan.shapes import dense


def _shape(tmp_path: Path, quant: str = "Q8_0") -> Path:
    kv, tensors = table_from_config(dense(), quant)
    path = tmp_path / "m.gguf"
    write_hole_gguf(kv, tensors, path)
    return path


def test_a_hole_gguf_reads_like_the_real_file(tmp_path: Path) -> None:
    kv, tensors = table_from_config(dense(), "Q8_0")
    path = tmp_path / "m.gguf"
    size = write_hole_gguf(kv, tensors, path)
    h = read_header(path)
    assert path.stat().st_size == size
    assert h.arch == "llama"
    assert h.key("block_count") == 8
    assert [(t.name, t.dims, t.type, t.nbytes) for t in h.tensors] == [
        (t.name, t.dims, t.type, t.nbytes) for t in tensors
    ]
    # the data region is a hole: the file takes far less disk than its size
    assert os.stat(path).st_blocks * 512 < size


def test_a_file_written_by_gguf_itself(tmp_path: Path) -> None:
    path = tmp_path / "real.gguf"
    w = GGUFWriter(str(path), "llama")
    w.add_block_count(1)
    w.add_array("tokenizer.ggml.tokens", [f"t{i}" for i in range(5000)])  # long: only counted
    w.add_tensor("token_embd.weight", np.zeros((10, 64), dtype=np.float32))
    w.add_tensor("blk.0.attn_norm.weight", np.ones(64, dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    h = read_header(path)
    by = {t.name: t for t in h.tensors}
    assert by["token_embd.weight"].dims == (64, 10)
    assert by["token_embd.weight"].nbytes == 64 * 10 * 4
    assert by["blk.0.attn_norm.weight"].nbytes == 128
    assert h.kv["tokenizer.ggml.tokens"].count == 5000


def test_a_gguf_that_lies_about_its_tensor_sizes(tmp_path: Path) -> None:
    path = _shape(tmp_path)
    os.truncate(path, path.stat().st_size - 4096)
    with pytest.raises(GgufError) as e:
        read_header(path)
    msg = str(e.value)
    assert "data region is" in msg and "shorter than its tensor table says" in msg
    assert "\n" not in msg
    assert isinstance(e.value, ConfigError) and e.value.exit_code == 2


def _raw(tmp_path: Path, body: bytes) -> Path:
    p = tmp_path / "raw.gguf"
    p.write_bytes(body)
    return p


def test_bad_magic_version_and_counts(tmp_path: Path) -> None:
    with pytest.raises(GgufError, match="does not start with GGUF"):
        read_header(_raw(tmp_path, b"GGML" + b"\0" * 60))
    with pytest.raises(GgufError, match="version 9"):
        read_header(_raw(tmp_path, b"GGUF" + struct.pack("<IQQ", 9, 0, 0)))
    with pytest.raises(GgufError, match=r"claims 1099511627776 tensors"):
        read_header(_raw(tmp_path, b"GGUF" + struct.pack("<IQQ", 3, 1 << 40, 0)))
    with pytest.raises(GgufError, match="claims 100000 keys"):
        read_header(_raw(tmp_path, b"GGUF" + struct.pack("<IQQ", 3, 0, 100_000)))


def test_a_string_longer_than_the_cap_or_the_file(tmp_path: Path) -> None:
    head = b"GGUF" + struct.pack("<IQQ", 3, 0, 1)
    with pytest.raises(GgufError, match="is 1099511627776 bytes long"):
        read_header(_raw(tmp_path, head + struct.pack("<Q", 1 << 40)))
    with pytest.raises(GgufError, match="runs past the end of the file"):
        read_header(_raw(tmp_path, head + struct.pack("<Q", 1000) + b"abc"))


def _one_tensor(dims: list[int], ttype: int, offset: int = 0) -> bytes:
    name = b"t"
    body = b"GGUF" + struct.pack("<IQQ", 3, 1, 0)
    body += struct.pack("<Q", len(name)) + name + struct.pack("<I", len(dims))
    body += b"".join(struct.pack("<Q", d) for d in dims) + struct.pack("<IQ", ttype, offset)
    return body + b"\0" * (-len(body) % 32)


def test_tensor_dims_types_and_offsets_are_checked(tmp_path: Path) -> None:
    with pytest.raises(GgufError, match="has 5 dimensions"):
        read_header(_raw(tmp_path, _one_tensor([1, 1, 1, 1, 1], 0)))
    with pytest.raises(GgufError, match="dimension above 2"):
        read_header(_raw(tmp_path, _one_tensor([1 << 41], 0)))
    with pytest.raises(GgufError, match="type 99"):
        read_header(_raw(tmp_path, _one_tensor([32], 99)))
    with pytest.raises(GgufError, match="not a multiple of the block size 32"):
        read_header(_raw(tmp_path, _one_tensor([33], 8)))  # Q8_0
    with pytest.raises(GgufError, match="not a multiple of the alignment"):
        read_header(_raw(tmp_path, _one_tensor([8], 0, offset=3) + b"\0" * 64))
    ok = read_header(_raw(tmp_path, _one_tensor([8], 0) + b"\0" * 32))
    assert ok.tensors[0].nbytes == 32


def test_a_missing_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the model"):
        read_header(tmp_path / "nope.gguf")
