"""build.repro: the environment that makes a build's bytes independent of its paths."""

from __future__ import annotations

from pathlib import Path

from patchkit.build.repro import build_env, prefix_maps, source_date_epoch


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
    env = build_env({"CFLAGS": "-O1"}, work_root=root, build_dir=root / "build",
                    commit_date="2026-08-07T12:34:56+00:00", launcher=None, nvcc=(13, 0, 88))
    assert env["CFLAGS"] == "-O1 -ffile-prefix-map=/c/w=.. -ffile-prefix-map=/c/w/build=."
    assert env["CXXFLAGS"] == "-ffile-prefix-map=/c/w=.. -ffile-prefix-map=/c/w/build=."
    assert env["CUDAFLAGS"] == ("--objdir-as-tempdir -Xcompiler=-ffile-prefix-map=/c/w=.. "
                                "-Xcompiler=-ffile-prefix-map=/c/w/build=.")
    assert env["SOURCE_DATE_EPOCH"] == "1786106096"
    assert "CUDAFLAGS" not in build_env({}, work_root=root, build_dir=root / "build",
                                        commit_date="2026-08-07T12:34:56Z", launcher="sccache")
    old = build_env({}, work_root=root, build_dir=root / "build",
                    commit_date="2026-08-07T12:34:56Z", launcher=None, nvcc=(11, 8, 89))
    assert "--objdir-as-tempdir" not in old["CUDAFLAGS"]  # not passed to an older nvcc


def test_env_with_ccache_adds_no_path_maps_and_a_users_epoch_wins() -> None:
    root = Path("/c/w")
    env = build_env({"SOURCE_DATE_EPOCH": "5"}, work_root=root, build_dir=root / "build",
                    commit_date="2026-08-07T12:34:56Z", launcher="ccache")
    assert env == {"SOURCE_DATE_EPOCH": "5"}
    # nvcc's temp-file names are in its objects, ccache or not
    env = build_env({}, work_root=root, build_dir=root / "build",
                    commit_date="2026-08-07T12:34:56Z", launcher="ccache", nvcc=(12, 4, 131))
    assert env["CUDAFLAGS"] == "--objdir-as-tempdir" and "CXXFLAGS" not in env
