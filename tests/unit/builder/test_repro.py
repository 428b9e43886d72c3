"""builder.repro: the environment that makes a build's bytes independent of its paths."""

from __future__ import annotations

from pathlib import Path

from patchkit.builder.repro import build_env, prefix_maps, source_date_epoch


def test_prefix_maps_give_the_paths_ccache_gives() -> None:
    root = Path("/c/work/cpu-rpc-1234")
    assert prefix_maps(root, root / "build") == [
        "-ffile-prefix-map=/c/work/cpu-rpc-1234=..",
        "-ffile-prefix-map=/c/work/cpu-rpc-1234/build=.",  # last: GCC tries it first
    ]


def test_source_date_epoch_is_the_commit_time() -> None:
    assert source_date_epoch("2026-08-07T12:34:56+00:00") == "1786106096"
    assert source_date_epoch("2026-08-07T14:34:56+02:00") == "1786106096"
    assert source_date_epoch("2026-08-07T12:34:56Z") == "1786106096"


def test_env_without_a_launcher_maps_paths_and_keeps_the_users_flags() -> None:
    root = Path("/c/w")
    env = build_env(
        {"CFLAGS": "-O1"},
        work_root=root,
        build_dir=root / "build",
        commit_date="2026-08-07T12:34:56+00:00",
        launcher=None,
        nvcc=(13, 0, 88),
    )
    assert env["CFLAGS"] == "-O1 -ffile-prefix-map=/c/w=.. -ffile-prefix-map=/c/w/build=."
    assert env["CXXFLAGS"] == "-ffile-prefix-map=/c/w=.. -ffile-prefix-map=/c/w/build=."
    assert env["CUDAFLAGS"] == (
        "--objdir-as-tempdir -Xcompiler=-ffile-prefix-map=/c/w=.. -Xcompiler=-ffile-prefix-map=/c/w/build=."
    )
    assert env["SOURCE_DATE_EPOCH"] == "1786106096"
    # sccache would hash the maps' absolute paths (no cross-machine hits): none with it
    assert build_env(
        {}, work_root=root, build_dir=root / "build", commit_date="2026-08-07T12:34:56Z", launcher="sccache"
    ) == {"SOURCE_DATE_EPOCH": "1786106096"}
    old = build_env(
        {},
        work_root=root,
        build_dir=root / "build",
        commit_date="2026-08-07T12:34:56Z",
        launcher=None,
        nvcc=(11, 8, 89),
    )
    assert "--objdir-as-tempdir" not in old["CUDAFLAGS"]  # not passed to an older nvcc


def test_env_with_ccache_maps_paths_too_and_keeps_them_out_of_its_hash() -> None:
    """With CCACHE_DISABLE=1 (or an uncacheable call, a fallback) ccache
    hands the compiler the absolute paths; the maps must be there whatever ccache does, and
    named in CCACHE_IGNOREOPTIONS so that the hash holds no folder (hits across folders)."""
    root = Path("/c/w")
    env = build_env(
        {"SOURCE_DATE_EPOCH": "5", "CCACHE_IGNOREOPTIONS": "-Wmine"},
        work_root=root,
        build_dir=root / "build",
        commit_date="2026-08-07T12:34:56Z",
        launcher="ccache",
    )
    maps = "-ffile-prefix-map=/c/w=.. -ffile-prefix-map=/c/w/build=."
    assert env == {
        "SOURCE_DATE_EPOCH": "5",
        "CFLAGS": maps,
        "CXXFLAGS": maps,
        "CCACHE_IGNOREOPTIONS": f"-Wmine {maps}",
    }
    # nvcc's -Xcompiler form: ccache hashes it whole, so it is named too
    env = build_env(
        {},
        work_root=root,
        build_dir=root / "build",
        commit_date="2026-08-07T12:34:56Z",
        launcher="ccache",
        nvcc=(12, 4, 131),
    )
    x = "-Xcompiler=-ffile-prefix-map=/c/w=.. -Xcompiler=-ffile-prefix-map=/c/w/build=."
    assert env["CUDAFLAGS"] == f"--objdir-as-tempdir {x}"
    assert env["CCACHE_IGNOREOPTIONS"] == f"{maps} {x}"
    # without a launcher ccache is not run: nothing to tell it
    none = build_env(
        {}, work_root=root, build_dir=root / "build", commit_date="2026-08-07T12:34:56Z", launcher=None
    )
    assert none["CFLAGS"] == maps and "CCACHE_IGNOREOPTIONS" not in none


def test_maps_go_with_every_launcher_but_sccache() -> None:
    from patchkit.builder.repro import maps_paths

    assert maps_paths(None) and maps_paths("ccache") and not maps_paths("sccache")


def test_include_maps_normalise_dirs_with_dots_as_ccache_does(tmp_path: Path) -> None:
    import json

    from patchkit.builder.repro import configured_with, include_maps, with_maps

    root = tmp_path / "work" / "cpu-rpc-1"
    build = root / "build"
    reply = build / ".cmake" / "api" / "v1" / "reply"
    reply.mkdir(parents=True)
    incs = [
        f"{root}/src/common/../vendor",
        f"{root}/src/ggml/src/..",
        f"{root}/src/ggml/src/.",
        f"{root}/src/include",
        "/usr/include/../include",
        f"{root}/src/ggml/src/../include",
    ]
    (reply / "target-a.json").write_text(
        json.dumps({"compileGroups": [{"includes": [{"path": p} for p in incs]}, {"includes": []}]})
    )
    (reply / "target-b.json").write_text("[broken")
    maps = include_maps(root, build)
    assert maps == [  # shortest first: GCC tries the last one first
        f"-ffile-prefix-map={root}/src/ggml/src/./=../src/ggml/src/",
        f"-ffile-prefix-map={root}/src/ggml/src/../=../src/ggml/",
        f"-ffile-prefix-map={root}/src/common/../vendor/=../src/vendor/",
        f"-ffile-prefix-map={root}/src/ggml/src/../include/=../src/ggml/include/",
    ]
    env = with_maps({"CFLAGS": "-O2", "CUDAFLAGS": "--objdir-as-tempdir"}, maps[:1])
    assert env["CFLAGS"] == f"-O2 {maps[0]}" and env["CXXFLAGS"] == maps[0]
    assert env["CUDAFLAGS"] == f"--objdir-as-tempdir -Xcompiler={maps[0]}"
    assert "CCACHE_IGNOREOPTIONS" not in env
    cc = with_maps({"CUDAFLAGS": "-O2", "CCACHE_IGNOREOPTIONS": "-x"}, maps[:1], launcher="ccache")
    assert cc["CCACHE_IGNOREOPTIONS"] == f"-x {maps[0]} -Xcompiler={maps[0]}"
    assert not configured_with(build, maps)
    (build / "CMakeCache.txt").write_text(f"CMAKE_CXX_FLAGS:STRING={' '.join(maps)}\n")
    assert configured_with(build, maps) and not configured_with(build, [*maps, "-fx=y/"])


def test_no_launcher_turns_ggmls_own_ccache_rule_off() -> None:
    from patchkit.builder.repro import launcher_defines

    assert launcher_defines(None) == {"GGML_CCACHE": "OFF"}
    assert launcher_defines("ccache") == {} and launcher_defines("sccache") == {}
