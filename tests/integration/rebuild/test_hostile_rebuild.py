"""`patchkit rebuild` of someone else's release (issue 25 item 3): a self-consistent hostile
release whose carried patch runs commands at configure and build time. The rebuild runs
them in the sandbox (no network, the host read-only), still says "identical"; only
``--no-sandbox`` lets them reach the host."""

from __future__ import annotations

import difflib
import shutil
from pathlib import Path

import pytest

from patchkit.builder import sandbox
from patchkit.core.errors import ToolMissing
from tests.fixtures.project import assert_error, invoke, write_patch
from tests.fixtures.upstream import CMAKELISTS

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


def _hostile_patch(marks: Path) -> str:
    """A patch to the fixture's CMakeLists.txt: a command at configure time (touch a file on
    the host, note the network it sees) and one after linking fixture-cli."""
    new = CMAKELISTS.replace(
        "project(fixture C)\n",
        "project(fixture C)\n"
        f"execute_process(COMMAND touch {marks}/configure)\n"
        'execute_process(COMMAND sh -c "cat /proc/net/dev > ${CMAKE_BINARY_DIR}/net.txt")\n',
    ).replace(
        "target_link_libraries(fixture-cli PRIVATE fixture-core)\n",
        "target_link_libraries(fixture-cli PRIVATE fixture-core)\n"
        # (in the sandbox, /tmp is its own empty tmpfs: the folder is made there, and lost)
        f"add_custom_command(TARGET fixture-cli POST_BUILD COMMAND mkdir -p {marks} COMMAND touch {marks}/build)\n",
    )
    diff = difflib.unified_diff(
        CMAKELISTS.splitlines(keepends=True),
        new.splitlines(keepends=True),
        "a/CMakeLists.txt",
        "b/CMakeLists.txt",
    )
    return "diff --git a/CMakeLists.txt b/CMakeLists.txt\n" + "".join(diff)


HEADER = """\
Subject: build: a little something extra
Why: a hostile release (issue 25 item 3)
Upstream-Status: inappropriate
When: ..
Default: yes
Experimental: no

"""


def test_a_carried_patch_runs_its_commands_only_inside_the_sandbox(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    write_patch(project / "patches", "0002-extra.patch", _hostile_patch(marks), header=HEADER)
    monkeypatch.setenv("PATCHKIT_CACHE", str(tmp_path / "cache"))
    r = invoke(project, "build", "fixture", "--out", str(tmp_path / "out"), "-j", "2")
    assert r.exit_code == 0, r.output
    assert (marks / "configure").exists() and (marks / "build").exists()  # the attacker's own build
    r = invoke(
        project, "release", "fixture", "--build-dir", str(tmp_path / "out"), "--out", str(tmp_path / "d")
    )
    assert r.exit_code == 0, r.output
    (archive,) = (tmp_path / "d").glob("*.tar.gz")
    for m in marks.iterdir():
        m.unlink()

    # the victim rebuilds it: the same bytes, and nothing of it on the host
    rb = tmp_path / "rb"
    r = invoke(project, "rebuild", str(archive), "--cache", str(rb), "-j", "2")
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith(f"identical: {archive.name} (")
    assert "in a sandbox (bubblewrap: no network, the host read-only)" in r.stderr
    assert list(marks.iterdir()) == []
    (net,) = rb.glob("work/*/build/net.txt")  # what the configure step saw: a loopback only
    interfaces = [ln.split(":")[0].strip() for ln in net.read_text().splitlines() if ":" in ln]
    assert interfaces == ["lo"], net.read_text()
    # its compile cache was its own (in the rebuild's cache), never the user's
    assert (rb / "ccache").is_dir() or shutil.which("ccache") is None

    # the explicit opt-out runs the release's code as the user: what the sandbox stopped
    r = invoke(project, "rebuild", str(archive), "--cache", str(tmp_path / "rb2"), "-j", "2", "--no-sandbox")
    assert r.exit_code == 0, r.output
    assert "NOT sandboxed (--no-sandbox)" in r.stderr
    assert (marks / "configure").exists() and (marks / "build").exists()


def test_smoke_needs_the_explicit_opt_out(project: Path, tmp_path: Path) -> None:
    archive = tmp_path / "x.tar.gz"
    archive.write_bytes(b"")
    r = invoke(project, "rebuild", str(archive), "--smoke")
    assert_error(r, 2, "--smoke runs the rebuilt binaries", "--no-sandbox")


def test_the_sandbox_is_read_only_without_network_and_says_when_it_cannot_start(tmp_path: Path) -> None:
    from patchkit.core.proc import run

    env = {"PATH": "/usr/local/bin:/usr/bin:/bin"}
    work = tmp_path / "work"
    box = sandbox.prepare([work], env)
    res = run(
        box.wrap(
            [
                "sh",
                "-c",
                f"touch {work}/ok && echo wrote-work; touch /usr/patchkit-probe || echo host-ro; "
                "cat /proc/net/dev",
            ]
        ),
        env=env,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    assert "wrote-work" in res.stdout and "host-ro" in res.stdout
    assert (work / "ok").exists() and not Path("/usr/patchkit-probe").exists()
    assert "eth0" not in res.stdout and "lo:" in res.stdout
    # no bwrap on PATH, or one that cannot make namespaces: one line naming the opt-out
    with pytest.raises(ToolMissing, match="needs bubblewrap") as e:
        sandbox.prepare([work], {"PATH": str(tmp_path / "empty")})
    assert "--no-sandbox" in e.value.hint
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "bwrap").write_text(
        "#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n"
    )
    (fake / "bwrap").chmod(0o755)
    with pytest.raises(ToolMissing, match="No permissions to create new namespace") as e:
        sandbox.prepare([work], {"PATH": f"{fake}:/usr/bin:/bin"})
    assert "--no-sandbox" in e.value.hint
