"""Hostile input across the whole pipeline, with real git, cmake, ninja and real signals:
a patch never makes patchkit read outside the source tree, an out dir of user files is
never swapped away, stopping patchkit stops its whole build, a full disk is named."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from patchkit.core.fs import sha256_file
from patchkit.core.lock import cache_lock
from patchkit.core.paths import cache_dir
from tests.fixtures.project import assert_error, build, invoke, write_recipe
from tests.fixtures.upstream import GIT_ENV, FixtureUpstream, commit_files, git

REPO_ROOT = Path(__file__).resolve().parents[2]
SECRET = "HOST-SECRET-7f3a9c"
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc, signals")


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    """A host file no build may ever copy."""
    p = tmp_path / "host" / "secret.txt"
    p.parent.mkdir()
    p.write_text(f"{SECRET}\n")
    return p


def _set_series(project: Path, body: str) -> None:
    from tests.fixtures.project import GUARD_HEADER

    patches = project / "patches"
    (patches / "0001-evil.patch").write_text(GUARD_HEADER.format(when="..") + body)
    (patches / "series").write_text(f"0001-evil.patch sha256={sha256_file(patches / '0001-evil.patch')}\n")


def _license_to_link(
    target: str, *, header: str = "diff --git a/LICENSE b/LICENSE", mode: str = "new file mode 120000"
) -> str:
    """LICENSE (which the output stage copies and release ships) turned into a symlink."""
    return (
        "diff --git a/LICENSE b/LICENSE\ndeleted file mode 100644\n"
        "index 0e61ba5..0000000\n--- a/LICENSE\n+++ /dev/null\n@@ -1,3 +0,0 @@\n"
        "-MIT License\n-\n-Copyright (c) fixture\n"
        f"{header}\n{mode}\nindex 0000000..1234567\n--- /dev/null\n+++ b/LICENSE\n"
        f"@@ -0,0 +1 @@\n+{target}\n\\ No newline at end of file\n"
    )


def _git_would_apply(upstream: FixtureUpstream, tmp_path: Path, patch: Path) -> bool:
    clone = tmp_path / "probe"
    if not clone.exists():
        git(tmp_path, "clone", "-q", str(upstream.path), str(clone))
    r = subprocess.run(
        ["git", "-C", str(clone), "apply", "--check", str(patch)],
        capture_output=True,
        text=True,
        env={**os.environ, **GIT_ENV},
    )
    return r.returncode == 0


def _no_secret_anywhere(*folders: Path) -> None:
    for folder in folders:
        for p in folder.rglob("*") if folder.exists() else ():
            if p.is_file() and not p.is_symlink():
                assert SECRET.encode() not in p.read_bytes(), p


@pytest.mark.parametrize(
    ("header", "mode"),
    [
        ("diff --git a/LICENSE b/LICENSE", "new file mode 120000"),
        ("diff --git a/LICENSE b/LICENSE", "new file mode 0120000"),  # git reads it as 120000
        ("diff --git x/LICENSE y/LICENSE", "new file mode 120000"),  # any -p1 prefix
        ('diff --git "a/LICENSE" "b/LICENSE"', "new file mode 120000"),  # quoted names
    ],
)
def test_a_patch_turning_license_into_a_host_link_is_refused_before_applying(
    project: Path, upstream: FixtureUpstream, tmp_path: Path, secret: Path, header: str, mode: str
) -> None:
    _set_series(project, _license_to_link(str(secret), header=header, mode=mode))
    assert _git_would_apply(upstream, tmp_path, project / "patches" / "0001-evil.patch")
    out = tmp_path / "out"
    r = build(project, out)
    assert_error(r, 5, "0001-evil.patch: refused: LICENSE: makes a symlink to", "absolute target")
    assert not out.exists()
    _no_secret_anywhere(out, cache_dir())
    r = invoke(project, "release", "fixture", "--out", str(tmp_path / "dist"))
    assert r.exit_code != 0 and not (tmp_path / "dist").exists()


def test_a_relative_link_climbing_out_is_refused_too(
    project: Path, upstream: FixtureUpstream, tmp_path: Path, secret: Path
) -> None:
    depth = len(cache_dir().parts) + 6
    target = "../" * depth + str(secret).lstrip("/")
    _set_series(project, _license_to_link(target))
    assert _git_would_apply(upstream, tmp_path, project / "patches" / "0001-evil.patch")
    assert_error(build(project, tmp_path / "out"), 5, "a target above the worktree")


@pytest.fixture
def linked_upstream(tmp_path: Path) -> Path:
    """An upstream that already has a symlink (docs/LICENSE.md -> ../LICENSE)."""
    repo = tmp_path / "linked"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "master")
    from tests.fixtures.upstream import make_upstream

    src = make_upstream(tmp_path / "src").path
    for p in src.iterdir():
        if p.name != ".git":
            subprocess.run(["cp", "-a", str(p), str(repo)], check=True)
    (repo / "docs").mkdir()
    os.symlink("../LICENSE", repo / "docs" / "LICENSE.md")
    commit_files(repo, {}, "with a link")
    return repo


def test_a_patch_repointing_an_upstream_link_without_a_mode_is_caught_after_apply(
    project: Path, linked_upstream: Path, tmp_path: Path, secret: Path
) -> None:
    head = git(linked_upstream, "rev-parse", "HEAD")
    write_recipe(project, "fixture", url=str(linked_upstream), commit=head)
    # no mode line at all: only the worktree knows docs/LICENSE.md is a link
    _set_series(
        project,
        "diff --git a/docs/LICENSE.md b/docs/LICENSE.md\n--- a/docs/LICENSE.md\n"
        f"+++ b/docs/LICENSE.md\n@@ -1 +1 @@\n-../LICENSE\n\\ No newline at end of file\n"
        f"+{secret}\n\\ No newline at end of file\n",
    )
    r = build(project, tmp_path / "out")
    assert_error(
        r, 5, "makes docs/LICENSE.md a symlink to", "resolves outside the worktree", "the worktree is reset"
    )
    wt = next((cache_dir() / "work").glob("fixture-*/src"))
    assert os.readlink(wt / "docs" / "LICENSE.md") == "../LICENSE"  # reset to the pin
    assert git(wt, "status", "--porcelain") == ""
    assert not (tmp_path / "out").exists()


def test_a_real_output_with_a_user_file_added_is_left_alone(project: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert build(project, out).exit_code == 0
    (out / "my-results.csv").write_text("precious")
    before = sorted(p.relative_to(out).as_posix() for p in out.rglob("*"))
    r = build(project, out)
    assert_error(r, 2, "holds my-results.csv, which patchkit did not write there")
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == before
    (out / "my-results.csv").unlink()
    assert build(project, out).exit_code == 0  # a folder that is only ours is replaced


@pytest.mark.parametrize("value", ["-h", "--upload-pack=touch PWNED", "--template=/tmp", "-"])
def test_upstream_values_that_look_like_options_never_reach_git_as_options(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.chdir(tmp_path)
    r = build(project, tmp_path / "out", f"--upstream={value}")
    assert_error(r, 4, "does not exist")
    assert not (tmp_path / "PWNED").exists() and not list(tmp_path.glob("*PWNED*"))


def test_check_refs_that_look_like_options(project: Path, upstream: FixtureUpstream, tmp_path: Path) -> None:
    for ref in ("--output=/tmp/pwned-by-patchkit", "-x"):
        r = invoke(project, "check", "fixture", "--repo", str(upstream.path), f"--ref={ref}")
        assert r.exit_code in (2, 4) and r.output.count("error: ") == 1, r.output
    assert not Path("/tmp/pwned-by-patchkit").exists()


# -- a full disk, for real: a file size limit on the patchkit process -----------------------


def _limit_file_size(limit: int):  # type: ignore[no-untyped-def]
    def preexec() -> None:
        import resource  # POSIX only

        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return preexec


def _patchkit(
    project: Path, *args: str, env: dict[str, str] | None = None, **kw: object
) -> subprocess.Popen[str]:
    full_env = {
        **os.environ,
        "PYTHONPATH": str(REPO_ROOT),
        "PYTHONDONTWRITEBYTECODE": "1",
        "COLUMNS": "200",
        **(env or {}),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "patchkit", "--project", str(project), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=full_env,
        **kw,
    )  # type: ignore[call-overload]


@linux_only
def test_a_file_size_limit_while_writing_the_output_names_the_out_dir(project: Path, tmp_path: Path) -> None:
    assert build(project, tmp_path / "first").exit_code == 0  # the cache is warm: no compiling
    out = tmp_path / "second" / "out"
    out.parent.mkdir()
    proc = _patchkit(
        project, "build", "fixture", "--out", str(out), "--no-smoke", preexec_fn=_limit_file_size(4096)
    )
    stdout, stderr = proc.communicate(timeout=300)
    text = " ".join((stdout + stderr).split())
    assert proc.returncode == 6, text
    assert f"is too large for {out}: its file system (mounted at" in text
    assert "ulimit -f" in text and "Traceback" not in text
    assert not out.exists() and os.listdir(out.parent) == []  # nothing half written


# -- stopping patchkit stops its whole build ---------------------------------------------------

SLOW_CMAKE = """\
cmake_minimum_required(VERSION 3.16)
project(slow C)
add_custom_command(OUTPUT ${CMAKE_BINARY_DIR}/gen.c
  COMMAND ${SLOW_PYTHON} ${CMAKE_SOURCE_DIR}/slow.py ${CMAKE_BINARY_DIR}/gen.c
  DEPENDS ${CMAKE_SOURCE_DIR}/slow.py)
add_executable(slow-cli ${CMAKE_BINARY_DIR}/gen.c)
"""

# a build step that, when PATCHKIT_TEST_SLOW names a file, starts a TERM-ignoring grandchild,
# writes both pids and its process group there, and sleeps
SLOW_PY = """\
import os, signal, subprocess, sys, time
flag = os.environ.get("PATCHKIT_TEST_SLOW")
if flag:
    child = subprocess.Popen([sys.executable, "-c",
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"])
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with open(flag + ".tmp", "w") as f:
        f.write(f"{os.getpid()} {child.pid} {os.getpgid(0)}\\n")
    os.replace(flag + ".tmp", flag)
    time.sleep(300)
with open(sys.argv[1], "w") as f:
    f.write("int main(void) { return 0; }\\n")
"""


@pytest.fixture(scope="module")
def slow_upstream(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    repo = tmp_path_factory.mktemp("slow") / "upstream"
    repo.mkdir()
    old = os.environ.copy()
    os.environ.update(GIT_ENV)
    try:
        git(repo, "init", "-q", "-b", "master")
        head = commit_files(
            repo, {"CMakeLists.txt": SLOW_CMAKE, "slow.py": SLOW_PY, "LICENSE": "MIT\n"}, "slow build"
        )
    finally:
        os.environ.clear()
        os.environ.update(old)
    return repo, head


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _group_members(pgid: int) -> list[int]:
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                found.append(int(d.name))
    return found


@linux_only
@pytest.mark.parametrize(
    "sig",
    [getattr(signal, n, None) for n in ("SIGTERM", "SIGINT", "SIGHUP")],
    ids=["SIGTERM", "SIGINT", "SIGHUP"],
)
def test_a_signal_to_patchkit_alone_stops_every_build_job_before_the_lock_is_freed(
    project: Path, tmp_path: Path, slow_upstream: tuple[Path, str], sig: int
) -> None:
    repo, head = slow_upstream
    write_recipe(
        project,
        "slow",
        url=str(repo),
        commit=head,
        targets='["slow-cli"]',
        extra=f'SLOW_PYTHON = "{sys.executable}"\n',
    )
    (project / "patches" / "series").write_text("")
    flag = tmp_path / "slow.pids"
    out = tmp_path / "out"
    proc = _patchkit(
        project,
        "build",
        "slow",
        "--out",
        str(out),
        "--no-smoke",
        "-j",
        "2",
        env={"PATCHKIT_CACHE": str(cache_dir()), "PATCHKIT_TEST_SLOW": str(flag)},
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 240
        while not flag.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the slow build step never started"
            time.sleep(0.1)
        step, grandchild, pgid = map(int, flag.read_text().split())
        assert _alive(step) and _alive(grandchild) and pgid != os.getpgid(0)
        os.kill(proc.pid, sig)  # patchkit's pid alone, as systemd, a CI cancel or `kill` do
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, stderr
    assert "error: interrupted" in stderr and "Traceback" not in stderr + stdout
    # the build's whole group is gone (the TERM-ignoring ones were KILLed) ...
    deadline = time.monotonic() + 5
    while (_alive(step) or _alive(grandchild) or _group_members(pgid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(step) and not _alive(grandchild) and _group_members(pgid) == []
    # ... the lock is free, nothing was half written, and the next build works
    with cache_lock(cache_dir(), "test"):
        pass
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]
    r = build(project, out, "--no-smoke", recipe="slow")
    assert r.exit_code == 0, r.output
    assert (out / "bin" / "slow-cli").is_file()


# -- Ctrl-C while Python is still importing ---------------------------------------------------

INTERRUPT_IMPORT = """\
import runpy, sys
module = sys.argv[1]
class Interrupt:
    def find_spec(self, name, path=None, target=None):
        if name == module:
            raise KeyboardInterrupt
        return None
sys.meta_path.insert(0, Interrupt())
sys.argv = ["patchkit", "list"]
runpy.run_module("patchkit", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize("module", ["click", "rich", "patchkit.cli", "patchkit.core.proc"])
def test_ctrl_c_while_importing_is_exit_130_without_a_traceback(module: str) -> None:
    r = subprocess.run(
        [sys.executable, "-c", INTERRUPT_IMPORT, module],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        timeout=120,
    )
    assert r.returncode == 130, r.stderr
    assert r.stderr.strip() == "error: interrupted" and "Traceback" not in r.stdout
