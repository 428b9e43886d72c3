"""The C library floor: recorded per file and overall in the manifest, `release` refusing
a file above the recipe's floor, `verify` recomputing it (crafted ELF files with
``.gnu.version_r``)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from patchkit.core.errors import ReleaseError
from patchkit.release import floor as floor_mod
from patchkit.release.verify import verify_dir
from patchkit.spec.manifest import FloorSummary, ReleaseManifest, load_manifest
from patchkit.spec.recipe import BuildSpec, Recipe, Upstream
from tests.fixtures.elf import make_elf, put_artifact
from tests.fixtures.release import COMMIT, do_release, make_build

LIBC = ("libc.so.6", ("GLIBC_2.2.5", "GLIBC_2.17"))
LIBSTDCXX = ("libstdc++.so.6", ("GLIBCXX_3.4.26", "CXXABI_1.3.11"))


def _recipe(**floor: str) -> Recipe:
    return Recipe(
        name="cpu-rpc",
        description="",
        path=Path("recipes/cpu-rpc.toml"),
        sha256="ab" * 32,
        upstream=Upstream(url="https://example.invalid/llama.cpp", commit=COMMIT),
        patches=(),
        allow_experimental=False,
        build=BuildSpec(targets=("llama-cli",), defines=()),
        os="linux",
        arch="x86_64",
        cuda=None,
        windows=None,
        release_floor=tuple((k.upper(), v) for k, v in floor.items()),
    )


def _build(tmp_path: Path, cli_glibc: str = "2.30") -> Path:
    build = make_build(tmp_path)
    put_artifact(
        build,
        "bin/llama-cli",
        make_elf(
            needed=("libllama.so", "libstdc++.so.6", "libc.so.6"),
            runpath="$ORIGIN",
            verneed=(("libc.so.6", ("GLIBC_2.2.5", f"GLIBC_{cli_glibc}")), LIBSTDCXX),
        ),
    )
    put_artifact(
        build,
        "bin/libggml.so",
        make_elf(needed=("libc.so.6", "libm.so.6"), runpath="$ORIGIN", soname="libggml.so", verneed=(LIBC,)),
    )
    return build


def _manifest(result: object) -> ReleaseManifest:
    m = load_manifest(result.manifest.read_bytes())  # type: ignore[attr-defined]
    assert isinstance(m, ReleaseManifest)
    return m


def test_release_records_the_floor_per_file_and_overall(tmp_path: Path) -> None:
    r = do_release(_build(tmp_path), tmp_path / "dist", recipe=_recipe(glibc="2.31"), allow_stale=True)
    m = _manifest(r)
    assert m.floor is not None
    assert dict(m.floor.newest) == {"CXXABI": "1.3.11", "GLIBC": "2.30", "GLIBCXX": "3.4.26"}
    assert dict(m.floor.stated) == {"GLIBC": "2.31"}
    files = {f.path: f for f in m.floor.files}
    assert dict(files["bin/llama-cli"].versions)["GLIBC"] == "2.30"
    assert files["bin/llama-cli"].system == ("libstdc++.so.6", "libc.so.6")  # libllama.so is shipped
    assert dict(files["bin/libggml.so"].versions) == {"GLIBC": "2.17"}
    assert files["bin/libggml.so"].system == ("libc.so.6", "libm.so.6")
    assert m.floor.system == ("libc.so.6", "libm.so.6", "libstdc++.so.6")
    assert r.floor == "CXXABI_1.3.11 GLIBC_2.30 GLIBCXX_3.4.26 (the recipe's floor: GLIBC_2.31)"
    assert verify_dir(tmp_path / "dist").differences == ()


def test_release_refuses_a_file_above_the_floor_and_writes_nothing(tmp_path: Path) -> None:
    build = _build(tmp_path, cli_glibc="2.34")
    with pytest.raises(ReleaseError) as e:
        do_release(build, tmp_path / "dist", recipe=_recipe(glibc="2.31", glibcxx="3.4.28"), allow_stale=True)
    assert e.value.exit_code == 12
    assert e.value.message.startswith(
        "bin/llama-cli needs GLIBC_2.34, above the floor GLIBC_2.31 that recipe cpu-rpc states"
    )
    assert "\n" not in e.value.message
    assert "root" in e.value.hint and "[release] glibc" in e.value.hint
    assert not (tmp_path / "dist").exists()


@pytest.mark.parametrize(
    ("floor", "first"),
    [
        ({"glibcxx": "3.4.25"}, "bin/llama-cli needs GLIBCXX_3.4.26, above the floor GLIBCXX_3.4.25"),
        ({"cxxabi": "1.3.9"}, "bin/llama-cli needs CXXABI_1.3.11, above the floor CXXABI_1.3.9"),
        ({"glibc": "2.16"}, "bin/libggml.so needs GLIBC_2.17, above the floor GLIBC_2.16"),
    ],
)
def test_each_family_is_held_to_its_floor(tmp_path: Path, floor: dict[str, str], first: str) -> None:
    with pytest.raises(ReleaseError, match="^" + first.replace(".", r"\.")):
        do_release(_build(tmp_path), tmp_path / "dist", recipe=_recipe(**floor), allow_stale=True)


def test_a_floor_equal_to_the_newest_version_passes(tmp_path: Path) -> None:
    r = do_release(
        _build(tmp_path),
        tmp_path / "dist",
        recipe=_recipe(glibc="2.30", glibcxx="3.4.26", cxxabi="1.3.11"),
        allow_stale=True,
    )
    assert _manifest(r).floor is not None


def test_without_a_recipe_the_floor_is_recorded_not_enforced(tmp_path: Path) -> None:
    r = do_release(_build(tmp_path, cli_glibc="2.34"), tmp_path / "dist")
    m = _manifest(r)
    assert m.floor is not None and dict(m.floor.stated) == {} and m.floor.newest["GLIBC"] == "2.34"
    assert r.floor.endswith("(no floor stated)")


def test_verify_refuses_an_archive_above_its_stated_floor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # an archive that some other tool (or an older patchkit) let through
    monkeypatch.setattr(floor_mod, "refuse_above", lambda summary, name: None)
    do_release(
        _build(tmp_path, cli_glibc="2.34"), tmp_path / "dist", recipe=_recipe(glibc="2.31"), allow_stale=True
    )
    diffs = verify_dir(tmp_path / "dist").differences
    assert len(diffs) == 1, diffs
    assert diffs[0].endswith(": bin/llama-cli needs GLIBC_2.34, above the floor GLIBC_2.31")


def test_verify_recomputes_the_floor_and_names_what_differs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = floor_mod.compute_floor

    def understated(elves: object, stated: object) -> FloorSummary | None:
        s = real(elves, stated)  # type: ignore[arg-type]
        assert s is not None
        files = tuple(
            dataclasses.replace(f, versions={**f.versions, "GLIBC": "2.17"})
            if f.path == "bin/llama-cli"
            else f
            for f in s.files
        )
        return dataclasses.replace(s, newest={**s.newest, "GLIBC": "2.17"}, files=files)

    monkeypatch.setattr(floor_mod, "compute_floor", understated)
    do_release(_build(tmp_path), tmp_path / "dist")
    monkeypatch.undo()
    diffs = verify_dir(tmp_path / "dist").differences
    assert any(
        "the files need CXXABI_1.3.11 GLIBC_2.30 GLIBCXX_3.4.26, the manifest's floor says" in d
        for d in diffs
    )
    assert any(": bin/llama-cli: needs CXXABI_1.3.11 GLIBC_2.30" in d for d in diffs), diffs


def test_a_manifest_without_a_floor_still_reads_and_verifies(tmp_path: Path) -> None:
    r = do_release(_build(tmp_path), tmp_path / "dist")
    raw = json.loads(r.manifest.read_bytes())
    del raw["floor"]
    old = load_manifest(json.dumps(raw).encode())
    assert isinstance(old, ReleaseManifest) and old.floor is None
    assert floor_mod.verify_floor("x.tar.gz", old, {}) == []


def test_windows_releases_have_no_floor(tmp_path: Path) -> None:
    assert floor_mod.compute_floor({}, {"GLIBC": "2.31"}) is None


def test_verify_prints_each_archives_floor(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from patchkit.cli import main

    r = do_release(_build(tmp_path), tmp_path / "dist", recipe=_recipe(glibc="2.31"), allow_stale=True)
    res = CliRunner().invoke(main, ["verify", str(tmp_path / "dist")])
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines()[-1] == (
        f"{r.archive.name}: C library floor CXXABI_1.3.11 GLIBC_2.30 GLIBCXX_3.4.26 (within the "
        "stated GLIBC_2.31); from the system: libc.so.6, libm.so.6, libstdc++.so.6"
    )


def test_the_floor_line_names_the_runtime_archive_and_the_driver_not_the_system(tmp_path: Path) -> None:
    # a CUDA build's files import cudart and cuBLAS (in the runtime archive beside it) and
    # libcuda (NVIDIA's driver): none of them is the system's to install
    from patchkit.spec.manifest import ImportSummary, RuntimeRef

    r = do_release(_build(tmp_path), tmp_path / "dist", recipe=_recipe(glibc="2.31"), allow_stale=True)
    m = load_manifest(r.manifest.read_bytes())
    assert isinstance(m, ReleaseManifest) and m.floor is not None
    summary = dataclasses.replace(
        m.floor, system=("libc.so.6", "libcublas.so.11", "libcuda.so.1", "libcudart.so.11.0", "libssl.so.3")
    )
    cuda = dataclasses.replace(
        m,
        floor=summary,
        runtime=RuntimeRef(
            archive="cudart-llama-linux-x86_64-cuda11.8.tar.gz",
            sha256="0" * 64,
            cuda="11.8",
            files=("bin/libcudart.so.11.0", "bin/libcublas.so.11", "bin/libcublasLt.so.11"),
        ),
        imports=ImportSummary(system=("libc.so.6",), driver=("libcuda.so.1",)),
    )
    line = floor_mod.floor_line("x.tar.gz", cuda)
    assert line.endswith(
        "; from the system: libc.so.6, libssl.so.3"
        "; from the CUDA runtime archive: libcublas.so.11, libcudart.so.11.0"
        "; from NVIDIA's driver: libcuda.so.1"
    ), line
    # a manifest without a runtime archive or driver imports: every one is the system's, as before
    plain = dataclasses.replace(m, floor=summary, runtime=None, imports=None)
    assert floor_mod.floor_line("x.tar.gz", plain).endswith(
        "from the system: libc.so.6, libcublas.so.11, libcuda.so.1, libcudart.so.11.0, libssl.so.3"
    )
