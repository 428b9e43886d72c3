"""upkeep.textapply answers as `git apply` does: randomised edits, compared with git itself."""

from __future__ import annotations

import os
import random
import subprocess
from pathlib import Path

import pytest

from patchkit.spec.patchfile import parse_apply_output, parse_diff
from patchkit.upkeep.textapply import FileContent, apply, blob_id, prepare

# few distinct lines, so that a preimage matches in several places (offsets, ambiguity)
_WORDS = [b"{\n", b"}\n", b"\n", b"return 0;\n", b"int x = 1;\n", b"x++;\n", b"if (x) {\n", b"// note\n"]


def _git(cwd: Path, *args: str, data: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "LC_ALL": "C", "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(cwd)}
    return subprocess.run(["git", *args], cwd=cwd, input=data, capture_output=True, env=env, check=False)


def _text(rng: random.Random, n: int) -> list[bytes]:
    return [rng.choice(_WORDS) if rng.random() < 0.5 else b"line %d\n" % rng.randrange(40) for _ in range(n)]


def _mutate(rng: random.Random, lines: list[bytes], edits: int) -> list[bytes]:
    out = list(lines)
    for _ in range(edits):
        op = rng.random()
        i = rng.randrange(len(out) + 1)
        if op < 0.4:
            out[i:i] = _text(rng, rng.randint(1, 4))
        elif op < 0.7 and out:
            del out[i : i + rng.randint(1, 3)]
        elif out:
            out[min(i, len(out) - 1)] = b"changed %d\n" % rng.randrange(1000)
    return out


def _diff(tmp: Path, old: bytes, new: bytes, context: int) -> bytes:
    (tmp / "a").mkdir(exist_ok=True)
    (tmp / "b").mkdir(exist_ok=True)
    (tmp / "a" / "f.c").write_bytes(old)
    (tmp / "b" / "f.c").write_bytes(new)
    out = _git(tmp, "diff", "--no-index", f"-U{context}", "a/f.c", "b/f.c").stdout
    return out.replace(b"a/a/f.c", b"a/f.c").replace(b"b/b/f.c", b"b/f.c")


def _git_verdict(tmp: Path, patch: bytes, target: bytes, reverse: bool = False) -> tuple[bool, str, bytes]:
    work = tmp / "work"
    work.mkdir(exist_ok=True)
    (work / "f.c").write_bytes(target)
    (tmp / "p.patch").write_bytes(patch)
    rev = ["-R"] if reverse else []
    r = _git(work, "apply", "-v", "--whitespace=nowarn", *rev, str(tmp / "p.patch"))
    out = (r.stdout + r.stderr).decode()
    ok = r.returncode == 0 and not any(ln.startswith("error: ") for ln in out.splitlines())
    if not ok:
        r = _git(work, "apply", "-v", "--whitespace=nowarn", "--check", "--reject", str(tmp / "p.patch"))
        out = (r.stdout + r.stderr).decode()
    return ok, out, (work / "f.c").read_bytes()


@pytest.mark.parametrize("seed", range(20))
def test_matches_git_apply_on_random_edits(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    cases = 0
    for _ in range(25):
        base = _text(rng, rng.randint(3, 60))
        if rng.random() < 0.2 and base:
            base[-1] = base[-1].rstrip(b"\n")  # no newline at the end
        ours = _mutate(rng, base, rng.randint(1, 4))
        patch = _diff(tmp_path, b"".join(base), b"".join(ours), rng.choice([0, 1, 1, 3]))
        if not patch:
            continue
        upstream = b"".join(_mutate(rng, base, rng.randint(0, 5)))
        parsed = parse_diff(patch.decode())
        text = prepare(patch, parsed)
        assert text is not None, patch.decode()
        ok, out, after = _git_verdict(tmp_path, patch, upstream)
        got = apply(text, {"f.c": FileContent(mode="100644", oid=blob_id(upstream), data=upstream)})
        offsets, conflicts = parse_apply_output(out, parsed.hunks)
        assert got.ok == ok, (patch.decode(), upstream.decode(), out)
        if ok:
            assert list(got.offsets) == offsets, out
            post = got.post["f.c"]
            assert post is not None and post.data == after
            assert post.oid == _git(tmp_path, "hash-object", "--stdin", data=after).stdout.decode().strip()
        else:
            assert list(got.conflicts) == conflicts, out
            rok, _, _ = _git_verdict(tmp_path, patch, upstream, reverse=True)
            rgot = apply(text, {"f.c": FileContent(mode="100644", oid="", data=upstream)}, reverse=True)
            assert rgot.ok == rok
        cases += 1
    assert cases >= 15


def test_created_and_deleted_files(tmp_path: Path) -> None:
    patch = (
        b"diff --git a/new.c b/new.c\nnew file mode 100644\nindex 0000000..1111111\n"
        b"--- /dev/null\n+++ b/new.c\n@@ -0,0 +1,2 @@\n+a\n+b\n"
        b"diff --git a/old.c b/old.c\ndeleted file mode 100644\nindex 2222222..0000000\n"
        b"--- a/old.c\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n"
    )
    text = prepare(patch, parse_diff(patch.decode()))
    assert text is not None
    old = FileContent(mode="100644", oid=blob_id(b"x\n"), data=b"x\n")
    res = apply(text, {"old.c": old, "new.c": None})
    assert res.ok and res.post["old.c"] is None
    new = res.post["new.c"]
    assert new is not None and new.data == b"a\nb\n"
    # the file is there already / the deleted one differs
    res = apply(text, {"old.c": FileContent(mode="100644", oid="", data=b"y\n"), "new.c": new})
    assert not res.ok
    assert [(c.file, c.hunk, c.reason) for c in res.conflicts] == [
        ("new.c", None, "already exists in working directory"),
        ("old.c", 1, "context does not match"),
    ]
    # reverse: the created file is there as created, the deleted one is gone
    assert apply(text, {"new.c": new, "old.c": None}, reverse=True).ok


def test_what_it_does_not_model_goes_to_git() -> None:
    rename = (
        b"diff --git a/a.c b/b.c\nsimilarity index 90%\nrename from a.c\nrename to b.c\n"
        b"--- a/a.c\n+++ b/b.c\n@@ -1 +1 @@\n-x\n+y\n"
    )
    mode = b"diff --git a/a.sh b/a.sh\nold mode 100644\nnew mode 100755\n"
    binary = b"diff --git a/a.bin b/a.bin\nindex 1..2 100644\nGIT binary patch\nliteral 1\nIcmZ?d00001\n\n"
    for patch in (rename, mode, binary):
        assert prepare(patch, parse_diff(patch.decode())) is None
