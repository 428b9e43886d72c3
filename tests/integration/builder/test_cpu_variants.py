"""`[build] cpu_variants` for real: CMake, ninja and gcc on a ggml-shaped fixture
(tests/fixtures/variants.py), then `release` and `verify` of what it built."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.fixtures.project import assert_error, build, invoke
from tests.fixtures.upstream import FixtureUpstream
from tests.fixtures.variants import make_variants_upstream, variants_recipe

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")


@pytest.fixture
def vup(tmp_path: Path) -> FixtureUpstream:
    return make_variants_upstream(tmp_path)


@pytest.fixture
def vproject(tmp_path: Path) -> Path:
    proj = tmp_path / "project"
    (proj / "recipes").mkdir(parents=True)
    (proj / "patches").mkdir()
    (proj / "patches" / "series").write_text("# no patches\n")
    return proj


def _info(out: Path) -> dict:
    return json.loads((out / "build-info.json").read_text())


def test_only_the_chosen_variants_are_built_shipped_recorded_and_loaded(
    vproject: Path, vup: FixtureUpstream, tmp_path: Path
) -> None:
    # the fixture's alderlake does not compile: had the filter let it through, this fails
    variants_recipe(vproject, vup, '["x64", "haswell"]')
    out = tmp_path / "out"
    r = build(vproject, out, recipe="variants")
    assert r.exit_code == 0, r.output
    shipped = sorted(p.name for p in (out / "bin").iterdir())
    assert shipped == [
        "fixture-cli",
        "libggml-base.so",
        "libggml-cpu-haswell.so",
        "libggml-cpu-x64.so",
        "libggml.so",
    ]
    data = _info(out)
    defines = data["cmake"]["defines"]
    assert defines["GGML_BACKEND_DL"] == "ON" and defines["GGML_CPU_ALL_VARIANTS"] == "ON"
    assert defines["GGML_NATIVE"] == "OFF" and defines["PATCHKIT_CPU_VARIANTS"] == "x64;haswell"
    assert "GGML_AVX2" not in defines  # each variant says its own instruction set
    assert not any("INCLUDE" in k for k in defines)  # the filter's host path is not recorded
    types = {a["path"]: a["type"] for a in data["artifacts"]}
    assert types["bin/libggml-cpu-x64.so"] == types["bin/libggml-cpu-haswell.so"] == "MODULE_LIBRARY"
    cv = data["cpu_variants"]
    assert [(v["name"], v["file"]) for v in cv["variants"]] == [
        ("x64", "bin/libggml-cpu-x64.so"),
        ("haswell", "bin/libggml-cpu-haswell.so"),
    ]
    assert cv["variants"][1]["features"] == ["SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2"]
    by_qemu = {m["qemu"]: m["variant"] for m in cv["models"]}
    assert by_qemu["Haswell"] == "haswell" and by_qemu["Nehalem"] == "x64"  # no sse42 built
    assert by_qemu["Skylake-Server"] == "haswell"
    # the program loads the best module from its own folder, wherever it is run from
    res = subprocess.run(
        [str(out / "bin" / "fixture-cli")], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "loaded CPU backend from libggml-cpu-haswell.so" in res.stdout

    # a second build with nothing changed reuses the configure (the filter is stable)
    r = build(vproject, out, recipe="variants")
    assert r.exit_code == 0 and "configure inputs unchanged" in r.output, r.output

    # release: the modules are files of the archive and roots of the import check;
    # the manifest copies the variants and the CPU table; verify recomputes and agrees
    dist = tmp_path / "dist"
    r = invoke(
        vproject, "release", "variants", "--build-dir", str(out), "--out", str(dist), "--allow-unsmoked"
    )
    assert r.exit_code == 0, r.output
    assert "bin/libggml-cpu-haswell.so: libggml-base.so (bin/libggml-base.so)" in r.output
    (manifest,) = dist.glob("*.manifest.json")
    m = json.loads(manifest.read_text())
    assert m["cpu_variants"] == cv
    assert {f["path"]: f["type"] for f in m["files"]}["bin/libggml-cpu-x64.so"] == "MODULE_LIBRARY"
    r = invoke(vproject, "verify", str(dist))
    assert r.exit_code == 0, r.output

    # rebuild from the archive alone: the same variants, every module's bytes compared
    r = invoke(
        tmp_path, "rebuild", str(dist), "--cache", str(tmp_path / "rb"), "-j", "2", "--launcher", "none"
    )
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith("identical: "), r.output
    assert "patchkit: CPU variant" not in r.stdout


def test_a_variant_the_compiler_cannot_build_fails_the_build(
    vproject: Path, vup: FixtureUpstream, tmp_path: Path
) -> None:
    """The negative control of the filter: alderlake chosen is alderlake compiled."""
    variants_recipe(vproject, vup, '["x64", "alderlake"]')
    r = build(vproject, tmp_path / "out", recipe="variants")
    assert_error(r, 6, "the build failed")
    assert not (tmp_path / "out").exists()


def test_a_variant_the_pin_does_not_define_is_a_recipe_error(
    vproject: Path, vup: FixtureUpstream, tmp_path: Path
) -> None:
    # cooperlake is a variant of ggml at the pin, but not of this upstream
    variants_recipe(vproject, vup, '["x64", "cooperlake"]')
    r = build(vproject, tmp_path / "out", recipe="variants")
    assert_error(r, 3, "defines no CPU variant 'cooperlake'", "remove it from build.cpu_variants")


def test_a_module_that_cannot_resolve_its_imports_is_refused_by_release(
    vproject: Path, vup: FixtureUpstream, tmp_path: Path
) -> None:
    """Nothing NEEDs a variant module (it is dlopen'd): it is checked as a root anyway."""
    if not Path("/usr/lib/x86_64-linux-gnu/libz.so").exists() and shutil.which("pkg-config") is None:
        pytest.skip("no libz to link")
    variants_recipe(vproject, vup, '["x64", "haswell"]', defines="FIXTURE_MODULE_NEEDS_Z = true\n")
    out = tmp_path / "out"
    r = build(vproject, out, recipe="variants")
    if r.exit_code == 6 and "-lz" in r.output:
        pytest.skip("no libz to link")
    assert r.exit_code == 0, r.output
    dist = tmp_path / "dist"
    r = invoke(
        vproject, "release", "variants", "--build-dir", str(out), "--out", str(dist), "--allow-unsmoked"
    )
    assert_error(r, 12, "bin/libggml-cpu-haswell.so needs libz.so.1")
    assert not dist.exists()


def _host_has(flag: str) -> bool:
    try:
        return flag in Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False


needs_qemu = pytest.mark.skipif(
    shutil.which("qemu-x86_64") is None and shutil.which("qemu-x86_64-static") is None,
    reason="qemu-user not installed",
)


@needs_qemu
def test_smoke_as_another_cpu_model_names_the_variant_it_loaded(
    vproject: Path, vup: FixtureUpstream, tmp_path: Path
) -> None:
    """`smoke --cpu MODEL`: the binaries run under qemu as that CPU; the variant ggml picks
    must be the one build-info's table names for it; nothing is written to build-info."""
    variants_recipe(vproject, vup, '["x64", "sse42", "haswell"]')
    out = tmp_path / "out"
    assert build(vproject, out, recipe="variants").exit_code == 0
    before = (out / "build-info.json").read_bytes()
    for model, variant in (("Nehalem", "sse42"), ("SandyBridge", "sse42"), ("Haswell", "haswell")):
        r = invoke(vproject, "smoke", str(out), "--only", "version", "--cpu", model)
        assert r.exit_code == 0, r.output
        assert f"under qemu -cpu {model}: answered: fixture-cli" in r.stdout, r.output
        assert f"loaded the CPU variant {variant}, as the variant table says for {model}" in r.stdout
        assert r.stdout.rstrip().endswith(f"smoke partial (under qemu -cpu {model})")
    assert (out / "build-info.json").read_bytes() == before  # not this machine's verdict
    if _host_has("avx2"):  # natively: the best this CPU can run, recorded
        r = invoke(vproject, "smoke", str(out), "--only", "version")
        assert r.exit_code == 0 and "loaded the CPU variant haswell" in r.stdout, r.output
        assert (out / "build-info.json").read_bytes() != before
    assert_error(
        invoke(vproject, "smoke", str(out), "--cpu", "sandybridge"),
        2,
        "--cpu 'sandybridge' is not a CPU model",
    )


@needs_qemu
def test_a_variant_that_claims_a_cpu_it_cannot_run_on_fails_under_that_cpu(
    vproject: Path, vup: FixtureUpstream, tmp_path: Path
) -> None:
    """The negative control: a haswell module whose score forgets AVX2 is picked on a
    Nehalem (no AVX2), against the table: the check fails, exit 7."""
    variants_recipe(vproject, vup, '["x64", "sse42", "haswell"]', defines="FIXTURE_WRONG_SCORE = true\n")
    out = tmp_path / "out"
    assert build(vproject, out, recipe="variants").exit_code == 0
    r = invoke(vproject, "smoke", str(out), "--only", "version", "--cpu", "Nehalem")
    assert r.exit_code == 7, r.output
    assert "loaded the CPU variant haswell; the variant table says sse42 for Nehalem" in r.stdout
    ok = invoke(vproject, "smoke", str(out), "--only", "version", "--cpu", "Haswell")
    assert ok.exit_code == 0, ok.output
