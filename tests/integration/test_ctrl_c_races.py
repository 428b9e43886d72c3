"""Ctrl-C races. A Ctrl-C soon after start landed before patchkit's handler
(a KeyboardInterrupt traceback, killed by SIGINT instead of exit 130); one that landed in
``core.proc`` between a child's start and the ``try`` that stops it left the child running
after patchkit exited 130; one that landed where Python swallows exceptions (a weakref
callback, ``__del__``) was lost: the command went on and exited 0, and every later Ctrl-C
was ignored."""

from __future__ import annotations

import json
import os
import signal
import site
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.fixtures.buildinfo import build_info_json

REPO_ROOT = Path(__file__).resolve().parents[2]
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc, POSIX signals")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _wait_dead(pids: list[int], seconds: float = 5) -> list[int]:
    deadline = time.monotonic() + seconds
    while (alive := [p for p in pids if _alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return alive


def _kill(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


# -- a Ctrl-C between a child's start and the code that stops it --------------------------

RACE = """\
import os, signal, sys
from pathlib import Path
from patchkit.core import proc

pidfile = Path(sys.argv[2])
child = [sys.executable, "-c",
         # written then renamed: the file appears whole (a kill before the write's end
         # would leave it empty)
         "import os, sys, time; t = sys.argv[1] + '.tmp'; open(t, 'w').write(str(os.getpid()));"
         " os.replace(t, sys.argv[1]); time.sleep(60)",
         str(pidfile)]
proc.install_signal_handlers()
real = proc._popen

def started_then_interrupted(*args, **kw):
    p = real(*args, **kw)  # the child runs now, but the caller does not hold it yet
    while not pidfile.exists():
        pass
    os.kill(os.getpid(), signal.SIGINT)  # the Ctrl-C lands here
    return p

proc._popen = started_then_interrupted
try:
    if sys.argv[1] == "run":
        proc.run(child)
    elif sys.argv[1] == "streaming":
        proc.run_streaming(child, log_path=pidfile.with_suffix(".log"))
    else:
        with proc.Processes(pidfile.parent / "logs") as procs:
            procs.start_server(child, 9, name="server", timeout=30)
except KeyboardInterrupt:
    print("interrupted")
    sys.exit(130)
print("not interrupted")
"""


@linux_only
@pytest.mark.parametrize("shape", ["run", "streaming", "server"])
def test_a_ctrl_c_right_after_a_child_started_still_stops_it(tmp_path: Path, shape: str) -> None:
    pidfile = tmp_path / "child.pid"
    r = subprocess.run(
        [sys.executable, "-c", RACE, shape, str(pidfile)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        timeout=120,
    )
    pid = int(pidfile.read_text())
    try:
        assert r.returncode == 130 and r.stdout == "interrupted\n", r.stdout + r.stderr
        assert _wait_dead([pid], 2) == [], f"the child {pid} outlived the interrupt"
    finally:
        _kill([pid])


# -- a Ctrl-C that lands where Python swallows exceptions ---------------------------------

SWALLOWED = """\
import gc, os, signal, sys, time, weakref
from patchkit.core import proc

proc.install_signal_handlers()

class Victim:
    pass

def callback(_ref):
    os.kill(os.getpid(), signal.SIGINT)  # the handler runs inside the callback ...
    for _ in range(1000):                # ... and its KeyboardInterrupt is swallowed there
        pass

v = Victim()
ref = weakref.ref(v, callback)
try:
    del v
    gc.collect()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        time.sleep(0.01)
except KeyboardInterrupt:
    print("interrupted")
    sys.exit(130)
print("not interrupted")
"""


@linux_only
def test_a_ctrl_c_swallowed_by_a_callback_is_delivered_again() -> None:
    r = subprocess.run(
        [sys.executable, "-c", SWALLOWED],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        timeout=60,
    )
    assert r.returncode == 130 and r.stdout == "interrupted\n", r.stdout + r.stderr
    assert "Exception ignored" not in r.stderr and "Traceback" not in r.stderr, r.stderr


# -- a signal after patchkit's first line, before its command has started anything ------

EARLY = """\
import os, signal, sys, time
import click.core
from patchkit.__main__ import main

signum = getattr(signal, sys.argv[1])
real = click.core._detect_program_name

def detect_then_signal(*args, **kw):  # inside click's main, before its own try
    os.kill(os.getpid(), signum)
    time.sleep(1)
    return real(*args, **kw)

click.core._detect_program_name = detect_then_signal
sys.argv = ["patchkit", "list"]
main()
print("not interrupted")
"""


@linux_only
@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_signal_before_the_command_starts_is_exit_130_with_one_line(sig: str) -> None:
    r = subprocess.run(
        [sys.executable, "-c", EARLY, sig],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        timeout=60,
    )
    assert r.returncode == 130, (r.returncode, r.stderr)
    assert r.stderr.strip() == "error: interrupted" and r.stdout == "", r.stdout + r.stderr


# -- the real command, interrupted at many moments ----------------------------------------

# pip's console-script wrapper for `patchkit = "patchkit.__main__:main"`, as it writes it
CONSOLE_SCRIPT = """\
import re
import sys
from patchkit.__main__ import main
if __name__ == '__main__':
    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])
    sys.exit(main())
"""

FAKE_TOOL = """\
#!{python}
import os, sys, time
open(os.path.join({piddir!r}, str(os.getpid())), "w").close()
time.sleep(0.2)
print("version: 1 (fake)")
"""


def _slow_build(tmp_path: Path, n: int = 12) -> tuple[Path, Path]:
    """An output folder whose executables each write their pid, then answer --version
    after 0.2 s: `patchkit smoke OUT --only version` runs them one after another."""
    out, piddir = tmp_path / "out", tmp_path / "pids"
    (out / "bin").mkdir(parents=True)
    piddir.mkdir()
    artifacts = []
    for i in range(n):
        exe = out / "bin" / f"tool-{i:02}"
        exe.write_text(FAKE_TOOL.format(python=sys.executable, piddir=str(piddir)))
        exe.chmod(0o755)
        artifacts.append(
            {
                "target": exe.name,
                "type": "EXECUTABLE",
                "path": f"bin/{exe.name}",
                "sha256": "0" * 64,
                "size": 1,
            }
        )
    (out / "build-info.json").write_text(json.dumps(build_info_json(artifacts=artifacts)))
    return out, piddir


def _patchkit_console(args: list[str], cwd: Path) -> subprocess.Popen[str]:
    """The console script, run the way its #! line runs it, except that Python's site is
    skipped (-S, site-packages on PYTHONPATH instead): a machine's own .pth files (which run
    before any of patchkit's code, and can take 100 ms) are not patchkit's to test."""
    paths = [str(REPO_ROOT), *site.getsitepackages()]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "COLUMNS": "200"}
    return subprocess.Popen(
        [sys.executable, "-S", "-c", CONSOLE_SCRIPT, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=cwd,
    )


def _before_patchkit(returncode: int, stderr: str) -> bool:
    """Killed before patchkit's first line ran: by SIGINT in Python's own startup or the
    console script's `import re` (a shell shows exit 130 for it), or Python's own "Fatal
    Python error" while it initialises; no frame of patchkit's in what it printed."""
    frames = [ln for ln in stderr.splitlines() if ln.strip().startswith('File "')]
    if any("patchkit" in ln for ln in frames):
        return False
    if returncode == -signal.SIGINT:
        return not stderr.strip() or bool(frames)
    return returncode == 1 and stderr.startswith("Fatal Python error: init_")


@linux_only
def test_ctrl_c_at_any_moment_is_exit_130_one_line_and_no_child_left(tmp_path: Path) -> None:
    out, piddir = _slow_build(tmp_path)
    results = []
    for delay in (0.0, 0.005, 0.01, 0.02, 0.03, 0.05, 0.08, 0.12, 0.18, 0.25, 0.35, 0.5, 0.7, 1.0, 1.4, 2.0):
        p = _patchkit_console(["smoke", str(out), "--only", "version"], cwd=tmp_path)
        time.sleep(delay)
        p.send_signal(signal.SIGINT)
        _, stderr = p.communicate(timeout=120)
        pids = [int(f.name) for f in piddir.iterdir()]
        left = _wait_dead(pids)
        _kill(left)
        for f in piddir.iterdir():
            f.unlink()
        results.append((delay, p.returncode, stderr))
        assert left == [], f"Ctrl-C after {delay}s left children {left} running"
        if _before_patchkit(p.returncode, stderr):
            continue  # nothing of patchkit's ran yet
        assert p.returncode == 130, f"Ctrl-C after {delay}s: exit {p.returncode}\n{stderr}"
        assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr
        assert [ln for ln in stderr.splitlines() if ln.startswith("error:")] == ["error: interrupted"], stderr
    # most moments are after patchkit's first line: they are the ones this test is about
    assert sum(rc == 130 for _, rc, _ in results) >= len(results) // 2, results


# -- Ctrl-C while Python imports patchkit's modules (injected, so exactly there) ----------

INTERRUPT_IMPORT = textwrap.dedent(
    """\
    import runpy, sys
    module = sys.argv[1]
    class Interrupt:
        def find_spec(self, name, path=None, target=None):
            if name == module:
                raise KeyboardInterrupt
            return None
    sys.meta_path.insert(0, Interrupt())
    sys.argv = ["patchkit", *sys.argv[2:]]
    runpy.run_module("patchkit", run_name="__main__", alter_sys=True)
    """
)


@pytest.mark.parametrize(
    ("module", "args"),
    [
        ("patchkit.cli.smoke", ["smoke", "out"]),  # the command's module, inside click's main
        ("patchkit.core.text", ["biuld"]),  # an unknown command's "did you mean"
        ("patchkit.cli.list", ["list"]),
    ],
)
def test_ctrl_c_while_importing_a_command_is_exit_130_without_a_traceback(
    module: str, args: list[str]
) -> None:
    r = subprocess.run(
        [sys.executable, "-c", INTERRUPT_IMPORT, module, *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        timeout=120,
    )
    assert r.returncode == 130, r.stderr
    assert r.stderr.strip() == "error: interrupted" and "Traceback" not in r.stdout
