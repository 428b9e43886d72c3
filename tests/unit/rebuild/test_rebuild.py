"""rebuild.rebuild's refusals: everything it reads from an archive is checked before a build."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from patchkit.cli import main
from patchkit.core.errors import ReleaseError
from patchkit.rebuild.problems import NoCarriedSources, NotAReleaseArchive, ReleaseNotVerified
from patchkit.rebuild.rebuild import SOURCE_FILES, RebuildOptions, archives_of, rebuild_archive
from patchkit.release.archive import Member, read_archive, write_archive
from patchkit.release.release import dump_manifest
from tests.fixtures.release import COMMIT_EPOCH, do_release, make_build, project_build
from tests.fixtures.wheels import runtime_wheels
from tests.unit.release.test_bundle import cuda_build


def _release(tmp_path: Path) -> Any:
    return do_release(make_build(tmp_path), tmp_path / "dist")


def _with_manifest(
    archive: Path, root: str, edit: Any, dest: Path, extra: dict[str, bytes] | None = None
) -> Path:
    entries = read_archive(archive, keep=[e.name for e in read_archive(archive)])
    files = {e.name[len(root) + 1 :]: e.data or b"" for e in entries}
    manifest = json.loads(files["manifest.json"])
    edit(manifest)
    files["manifest.json"] = dump_manifest(manifest)
    files.update(extra or {})
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / archive.name
    write_archive(
        out, root, [Member(name=n, mode=0o644, data=d) for n, d in files.items()], mtime=COMMIT_EPOCH
    )
    return out


def test_an_archive_without_sources_is_refused_before_building(tmp_path: Path) -> None:
    r = _release(tmp_path)
    assert json.loads(r.manifest.read_text())["source"] is None  # released without a recipe
    with pytest.raises(ReleaseError) as e:
        rebuild_archive(r.archive, RebuildOptions(env={}, cache=tmp_path / "cache"))
    assert e.value.problem == NoCarriedSources(archive=r.archive.name)
    assert not (tmp_path / "cache").exists()


def test_a_folder_must_verify_and_a_file_must_be_an_archive(tmp_path: Path) -> None:
    r = _release(tmp_path)
    assert archives_of(tmp_path / "dist") == [r.archive]
    assert archives_of(r.archive) == [r.archive]
    (tmp_path / "dist" / "SHA256SUMS").write_text("nonsense\n")
    with pytest.raises(ReleaseError) as e:
        archives_of(tmp_path / "dist")
    assert isinstance(e.value.problem, ReleaseNotVerified) and e.value.problem.target == tmp_path / "dist"
    assert e.value.problem.differences > 0
    with pytest.raises(ReleaseError, match="neither a release folder nor"):
        archives_of(r.manifest)
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"not gzip")
    with pytest.raises(ReleaseError, match="junk.tar.gz: not a readable tar.gz archive"):
        rebuild_archive(junk, RebuildOptions(env={}))


def _sources(**over: Any) -> dict[str, Any]:
    return {
        "recipe": "source/recipes/cpu-rpc.toml",
        "series": "source/patches/series",
        "patches": [],
        "toolchain": None,
        **over,
    }


def test_source_paths_named_by_the_manifest_are_checked(tmp_path: Path) -> None:
    r = _release(tmp_path)
    bad = _with_manifest(
        r.archive,
        r.name,
        lambda m: m.update(source=_sources(recipe="source/../../etc/passwd")),
        tmp_path / "evil",
    )
    with pytest.raises(ReleaseError, match="is not a path under source/"):
        rebuild_archive(bad, RebuildOptions(env={}))
    missing = _with_manifest(r.archive, r.name, lambda m: m.update(source=_sources()), tmp_path / "missing")
    with pytest.raises(ReleaseError, match="named by the manifest but not in the archive"):
        rebuild_archive(missing, RebuildOptions(env={}))
    many = _with_manifest(
        r.archive,
        r.name,
        lambda m: m.update(
            source=_sources(patches=[f"source/patches/{i}.patch" for i in range(SOURCE_FILES)])
        ),
        tmp_path / "many",
    )
    with pytest.raises(ReleaseError, match=f"names {SOURCE_FILES + 2} source files"):
        rebuild_archive(many, RebuildOptions(env={}))
    # present, but not what the manifest's files list says
    unlisted = _with_manifest(
        r.archive,
        r.name,
        lambda m: m.update(source=_sources()),
        tmp_path / "unlisted",
        extra={"source/recipes/cpu-rpc.toml": b"name = 'x'\n", "source/patches/series": b""},
    )
    with pytest.raises(ReleaseError, match="does not match the manifest's files list"):
        rebuild_archive(unlisted, RebuildOptions(env={}))


def test_a_manifest_that_does_not_fit_is_one_line_naming_the_key(tmp_path: Path) -> None:
    r = _release(tmp_path)
    bad = _with_manifest(
        r.archive, r.name, lambda m: m.update(source=_sources(patches="not a list")), tmp_path / "bad"
    )
    with pytest.raises(ReleaseError) as e:
        rebuild_archive(bad, RebuildOptions(env={}))
    assert e.value.message == (
        f"{bad.name}: manifest.json: source.patches is missing or not the expected type"
    )
    missing = _with_manifest(r.archive, r.name, lambda m: m["upstream"].pop("url"), tmp_path / "missing")
    with pytest.raises(ReleaseError, match=r"manifest.json: upstream\.url is missing or not the expected"):
        rebuild_archive(missing, RebuildOptions(env={}))
    listed = _with_manifest(r.archive, r.name, lambda m: m.update(files="all"), tmp_path / "files")
    with pytest.raises(ReleaseError, match=r"manifest.json: files is missing"):
        rebuild_archive(listed, RebuildOptions(env={}))
    for i, junk in enumerate((b"[]", b"not json", b"")):
        arch = _with_manifest(
            r.archive, r.name, lambda m: None, tmp_path / f"junk{i}", extra={"manifest.json": junk}
        )
        with pytest.raises(ReleaseError, match="manifest.json is not a JSON object"):
            rebuild_archive(arch, RebuildOptions(env={}))


def test_a_folders_cuda_runtime_archive_is_not_rebuilt(tmp_path: Path) -> None:
    """NVIDIA's files, told by its manifest's kind (not its name)."""
    wheels = tmp_path / "wheels"
    runtime_wheels(wheels, major=12, minor=4)
    dist = tmp_path / "dist"
    r = do_release(cuda_build(tmp_path / "a"), dist, runtime_wheels=wheels)
    assert r.runtime is not None and r.runtime.is_file()
    assert archives_of(dist) == [r.archive]
    # given by itself, it is refused like any archive without sources
    with pytest.raises(ReleaseError) as e:
        rebuild_archive(r.runtime, RebuildOptions(env={}))
    assert e.value.problem == NoCarriedSources(archive=r.runtime.name)


def _tar_gz(dest: Path, entries: list[tuple[str, bytes, int]], mtime: int) -> Path:
    """A tar.gz with exactly ``entries`` (full name, bytes, mode) in that order, duplicates kept."""
    import gzip
    import io
    import tarfile

    dest.parent.mkdir(parents=True, exist_ok=True)
    with gzip.GzipFile(dest, mode="wb", mtime=0) as gz, tarfile.open(fileobj=gz, mode="w") as tar:
        for name, data, mode in entries:
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), mtime, mode
            tar.addfile(info, io.BytesIO(data))
    return dest


def test_a_member_swapped_behind_its_manifest_is_refused_before_building(
    project: Path, tmp_path: Path
) -> None:
    """The rebuild is compared with the manifest's sha256s, so the archive's
    own members must be those: a trojaned bin/ file (manifest untouched), or a second member
    of the same name (``tar x`` keeps the last), is refused, never "identical"."""
    recipe, _, build = project_build(project, tmp_path)
    r = do_release(build, tmp_path / "dist", recipe=recipe, project=project)
    entries = read_archive(r.archive, keep=[e.name for e in read_archive(r.archive)])
    assert any(e.name.endswith("/source/recipes/fixture.toml") for e in entries)  # it carries sources
    cli = f"{r.name}/bin/llama-cli"
    whole = [(e.name, e.data or b"", e.mode) for e in entries]
    epoch = json.loads(r.manifest.read_text())["source_date_epoch"]
    swapped = _tar_gz(
        tmp_path / "swapped" / r.archive.name,
        [(n, b"\x7fELF trojan" if n == cli else d, m) for n, d, m in whole],
        epoch,
    )
    twice = _tar_gz(tmp_path / "twice" / r.archive.name, [*whole, (cli, b"\x7fELF trojan", 0o755)], epoch)
    opts = RebuildOptions(env={}, cache=tmp_path / "cache")
    with pytest.raises(ReleaseError, match="its members are not the files its manifest lists") as e:
        rebuild_archive(swapped, opts)
    assert "bin/llama-cli: sha256 is" in e.value.detail
    assert isinstance(e.value.problem, NotAReleaseArchive) and e.value.problem.against == "members"
    with pytest.raises(ReleaseError, match=r"member '.*/bin/llama-cli' appears twice"):
        rebuild_archive(twice, opts)
    # a member the manifest does not list is refused the same way
    extra = _tar_gz(tmp_path / "extra" / r.archive.name, [*whole, (f"{r.name}/bin/zz", b"x", 0o755)], epoch)
    with pytest.raises(ReleaseError, match="its members are not the files") as e:
        rebuild_archive(extra, opts)
    assert "bin/zz is in the archive but not in the manifest" in e.value.detail
    assert not (tmp_path / "cache").exists()  # refused before anything was built


def test_what_rebuild_reports_from_an_archive_is_escaped(project: Path, tmp_path: Path) -> None:
    """Member names (and every other string of the archive) in rebuild's
    errors reach the terminal with their control characters escaped."""
    recipe, _, build = project_build(project, tmp_path)
    r = do_release(build, tmp_path / "dist", recipe=recipe, project=project)
    entries = read_archive(r.archive, keep=[e.name for e in read_archive(r.archive)])
    whole = [(e.name, e.data or b"", e.mode) for e in entries]
    epoch = json.loads(r.manifest.read_text())["source_date_epoch"]
    evil = _tar_gz(
        tmp_path / "evil" / r.archive.name, [*whole, (f"{r.name}/bin/\x1b]0;pwned\x07", b"x", 0o755)], epoch
    )
    with pytest.raises(ReleaseError) as e:
        rebuild_archive(evil, RebuildOptions(env={}, cache=tmp_path / "cache"))
    assert "bin/\\x1b]0;pwned\\x07 is in the archive but not in the manifest" in e.value.detail
    assert "\x1b" not in e.value.detail + e.value.message
    # and what the command shows: the error's every line
    res = CliRunner().invoke(main, ["rebuild", str(evil), "--cache", str(tmp_path / "c2")])
    assert res.exit_code == 12, res.output
    assert "bin/\\x1b]0;pwned\\x07" in res.output and "\x1b" not in res.output


@pytest.mark.parametrize(
    ("define", "why"),
    [
        (
            'CMAKE_C_COMPILER_LAUNCHER = "/bin/sh;-c;touch /tmp/y;true"',
            "CMAKE_C_COMPILER_LAUNCHER names a program",
        ),
        ('CMAKE_C_COMPILER = "/bin/sh"', "CMAKE_C_COMPILER names a program"),
        ('CMAKE_PROJECT_INCLUDE = "/tmp/evil.cmake"', "CMAKE_PROJECT_INCLUDE names a program, script"),
        ('CMAKE_TOOLCHAIN_FILE = "/tmp/evil.cmake"', "CMAKE_TOOLCHAIN_FILE names"),
        ('CMAKE_C_CLANG_TIDY = "/bin/sh;-c;id"', "CMAKE_C_CLANG_TIDY names"),
        (
            'CMAKE_C_FLAGS = "-O2 -wrapper /bin/sh,-c,id"',
            "CMAKE_C_FLAGS holds the compiler option '-wrapper'",
        ),
        ('CMAKE_C_FLAGS = "-O2 @opts.rsp"', "CMAKE_C_FLAGS holds the compiler option '@opts.rsp'"),
        # ninja runs every compile line through /bin/sh: a shell command in a flag
        ('CMAKE_C_FLAGS = "-O2 `touch /tmp/x`"', "CMAKE_C_FLAGS holds '`', which a shell runs"),
        ('CMAKE_C_COMPILER_ARG1 = "-O2; touch /tmp/x;"', "CMAKE_C_COMPILER_ARG1 holds ';', which a shell"),
        ('CMAKE_EXE_LINKER_FLAGS = "-s $(touch /tmp/x)"', "CMAKE_EXE_LINKER_FLAGS holds '$(', which"),
        ('GGML_FOO = "x > /tmp/x"', "GGML_FOO holds '>', which a shell runs"),
    ],
    ids=[
        "launcher",
        "compiler",
        "project-include",
        "toolchain",
        "clang-tidy",
        "gcc-wrapper",
        "response-file",
        "backquote-in-flags",
        "semicolon-in-arg1",
        "substitution-in-linker-flags",
        "redirect-in-any-define",
    ],
)
def test_a_carried_recipe_naming_a_program_to_run_is_refused(
    project: Path, tmp_path: Path, define: str, why: str
) -> None:
    """A carried recipe's `[build.defines]` ran a launcher of its choosing
    (`/bin/sh -c touch /tmp/y`) on the rebuilding machine; refused before anything runs."""
    recipe_path = project / "recipes" / "fixture.toml"
    recipe_path.write_text(recipe_path.read_text() + f"{define}\n")
    recipe, _, build = project_build(project, tmp_path)
    r = do_release(build, tmp_path / "dist", recipe=recipe, project=project)
    for sandboxed in (True, False):
        with pytest.raises(ReleaseError) as e:
            rebuild_archive(r.archive, RebuildOptions(env={}, cache=tmp_path / "cache", sandbox=sandboxed))
        assert e.value.message.startswith(
            f"{r.archive.name}: carried recipe recipes/fixture.toml: [build.defines] {why}"
        ), e.value.message
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize(
    "value",
    [
        "-O2 `id`",
        "-O2 $(id)",
        "-O2; id",
        "-O2 | id",
        "-O2 && id",
        "-O2 & id",
        "-O2 > f",
        "-O2 < f",
        "-O2\nid",
        "-O2\rid",
        "-O2\x00",
    ],
)
@pytest.mark.parametrize(
    "name",
    [
        "CMAKE_C_FLAGS",
        "CMAKE_CXX_FLAGS_RELEASE",
        "CMAKE_CUDA_FLAGS",
        "CMAKE_EXE_LINKER_FLAGS_INIT",
        "CMAKE_SHARED_LINKER_FLAGS",
        "CMAKE_STATIC_LINKER_FLAGS",
        "CMAKE_C_COMPILER_ARG1",
        "CMAKE_CXX_STANDARD_LIBRARIES",
        "CMAKE_C_STANDARD_INCLUDE_DIRECTORIES",
        "FOO_DEFINITIONS",
        "GGML_CUDA_NVCC_FLAGS",
    ],
)
def test_shell_in_a_command_line_define_is_refused(name: str, value: str) -> None:
    """Every define CMake pastes into a command line unquoted, with every shell
    metacharacter (the list separator ``;`` too: it separates shell commands there)."""
    from patchkit.builder.sandbox import command_define

    assert "which a shell runs" in command_define(name, value), (name, value)


def test_a_list_define_may_hold_a_semicolon_but_nothing_else_of_a_shell() -> None:
    from patchkit.builder.sandbox import command_define

    assert command_define("CMAKE_CUDA_ARCHITECTURES", "60-real;86-real") == ""
    assert command_define("GGML_BACKENDS", "a;b") == ""
    for value in ("a`id`", "a$(id)", "a|b", "a&b", "a>b", "a\nb"):
        assert "which a shell runs" in command_define("GGML_BACKENDS", value), value


def test_an_ordinary_define_passes_the_rule() -> None:
    from patchkit.builder.sandbox import command_define

    for name, value in (
        ("GGML_RPC", "ON"),
        ("CMAKE_CUDA_ARCHITECTURES", "60-real;86-real"),
        ("CMAKE_EXPORT_COMPILE_COMMANDS", "ON"),
        ("CMAKE_EXE_LINKER_FLAGS", "-Wl,-Bsymbolic -Wl,--as-needed"),
        ("CMAKE_C_FLAGS", "-O2 -march=x86-64-v3 -fno-plt"),
        ("CMAKE_INSTALL_RPATH", "$ORIGIN"),
        ("BUILD_SHARED_LIBS", "OFF"),
    ):
        assert command_define(name, value) == "", name
    # and every shipped recipe's defines: a release of one rebuilds
    import tomllib

    from tests.fixtures.paths import REPO

    for path in sorted((REPO / "recipes").glob("*.toml")):
        defines = tomllib.loads(path.read_text()).get("build", {}).get("defines", {})
        for name, value in defines.items():
            assert command_define(name, str(value)) == "", (path.name, name)


@pytest.mark.parametrize("field", ["toolkit_root", "host_compiler"])
def test_a_carried_recipes_cuda_programs_are_refused(field: str) -> None:
    """[cuda] toolkit_root is where nvcc is run from and host_compiler a program: a carried
    recipe may choose neither."""
    import dataclasses

    from patchkit.rebuild.rebuild import _refuse_command_defines
    from patchkit.spec.recipe import load_recipe
    from patchkit.spec.series import load_series
    from tests.fixtures.paths import REPO

    recipe = load_recipe(REPO / "recipes/cuda-turing-ampere.toml", REPO, load_series(REPO / "patches"))
    assert recipe.cuda is not None
    _refuse_command_defines("x.tar.gz", "recipes/cuda-turing-ampere.toml", recipe)  # as shipped: fine
    evil = dataclasses.replace(recipe, cuda=dataclasses.replace(recipe.cuda, **{field: "/tmp/evil/bin"}))
    with pytest.raises(ReleaseError, match=rf"\[cuda\] {field} names a program the build would run"):
        _refuse_command_defines("x.tar.gz", "recipes/cuda-turing-ampere.toml", evil)
