"""`patchkit check --range` at queue scale: this tree against an older patchkit, side by side.

    python3 benchmarks/check_scale_bench.py --synthetic [--patches 30] [--commits 250]
    python3 benchmarks/check_scale_bench.py --repo LLAMA_MIRROR --project DIR --range OLD..NEW \\
        [--patches 30] [--commits 250] [--before /path/to/old/patchkit]

Each run is a fresh `python -m patchkit check --all --range ... --json` process, as a user
or CI runs it; wall time and CPU time (user + system of the process and its children) are
printed for both trees with their ratio, and the two JSON reports are compared verdict by
verdict (status, offsets, conflicts, note: the newer tree must say what the older one said;
what it adds, like `cascade_of`, is left out of the comparison).

``--synthetic`` makes the repository and queue itself (a fixed seed): an upstream whose
first-parent history touches the patched files at most commits, as llama.cpp's does, and a
queue of ``--patches`` patches, 2-4 hunks each over a few shared files, some stacked on
others. ``--project DIR``: a patchkit project (``recipes/`` + ``patches/``), e.g. a queue
taken in with `patchkit series import`; ``--patches N`` keeps its first N patches,
``--commits N`` the last N first-parent commits of the range. ``--before`` is a checkout
of the older patchkit (default: none, only this tree is timed). Nothing here asserts a
time: the numbers are for people to read (tests never time anything).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def git(repo: Path, *args: str, data: bytes | None = None) -> str:
    env = {**os.environ, "LC_ALL": "C", "GIT_CONFIG_NOSYSTEM": "1"}
    env |= {"GIT_AUTHOR_NAME": "B", "GIT_AUTHOR_EMAIL": "b@b.invalid", "GIT_COMMITTER_NAME": "B"}
    env |= {"GIT_COMMITTER_EMAIL": "b@b.invalid"}
    out = subprocess.run(
        ["git", "-C", str(repo), *args], input=data, capture_output=True, env=env, check=True
    )
    return out.stdout.decode()


def run_check(code: Path, project: Path, repo: Path, old: str, new: str) -> tuple[float, float, int, dict]:
    env = {**os.environ, "PYTHONPATH": str(code)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "patchkit", "--project", str(project), "check", "--all"),
            *("--repo", str(repo), "--range", f"{old}..{new}", "--json"),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=code,  # `python -m` puts the current folder first on sys.path
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode not in (0, 11):
        sys.exit(f"patchkit ({code}) failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return wall, cpu, proc.returncode, json.loads(proc.stdout)


def compare(a: dict, b: dict) -> tuple[int, int, list[str]]:
    """(verdicts equal, verdicts in all, the first differences)."""
    same = total = 0
    diffs: list[str] = []
    keys = ("status", "offsets", "conflicts", "note")
    for ra, rb in zip(a["refs"], b["refs"], strict=True):
        for x, y in zip(ra["results"], rb["results"], strict=True):
            total += 1
            if all(x.get(k) == y.get(k) for k in keys):
                same += 1
            elif len(diffs) < 5:
                diffs.append(f"{ra['ref']} {x['patch']}: {x['status']} vs {y['status']}")
    return same, total, diffs


# -- a synthetic upstream and queue ---------------------------------------------------------
def _file_lines(rng: random.Random, name: str, n: int) -> list[str]:
    return [f"int {name}_{i} = {rng.randrange(1000)}; /* {rng.randrange(10**6)} */\n" for i in range(n)]


def synthetic(root: Path, n_patches: int, n_commits: int, seed: int = 24) -> tuple[Path, Path, str, str]:
    """(repo, project, old, new): upstream files of 3,000-9,000 lines; each commit edits a
    few lines of one or two files (most of them patched files); the queue's patches each
    change 2-4 places over those files, one in five on top of an earlier patch."""
    rng = random.Random(seed)
    repo = root / "upstream"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "master")
    names = [f"src/file{i}.c" for i in range(12)]
    files = {n: _file_lines(rng, n.split("/")[1][:-2], rng.randint(3000, 9000)) for n in names}
    chunks: list[bytes] = []

    def commit(mark: int, msg: str, changed: list[str]) -> None:
        body = msg.encode()
        chunks.append(b"commit refs/heads/master\nmark :%d\n" % mark)
        chunks.append(b"committer B <b@b.invalid> %d +0000\n" % (1700000000 + mark * 600))
        chunks.append(b"data %d\n%s\n" % (len(body), body))
        if mark > 1:
            chunks.append(b"from :%d\n" % (mark - 1))
        for n in changed:
            data = "".join(files[n]).encode()
            chunks.append(b"M 100644 inline %s\ndata %d\n%s\n" % (n.encode(), len(data), data))

    commit(1, "base", names)
    for c in range(2, n_commits + 2):
        touched = rng.sample(names[:8] if rng.random() < 0.8 else names, rng.randint(1, 2))
        for n in touched:
            lines = files[n]
            for _ in range(rng.randint(1, 4)):
                i = rng.randrange(len(lines))
                op = rng.random()
                if op < 0.4:
                    lines.insert(i, f"int added_{c}_{i} = {c};\n")
                elif op < 0.6 and len(lines) > 100:
                    del lines[i]
                else:
                    lines[i] = f"int changed_{c}_{i} = {c}; /* upstream */\n"
        commit(c, f"upstream change {c} (#{10000 + c})", touched)
    subprocess.run(["git", "-C", str(repo), "fast-import", "--quiet"], input=b"".join(chunks), check=True)
    shas = git(repo, "rev-list", "--first-parent", "--reverse", "master").split()
    old = shas[0]
    # the queue, made against the base
    base = {n: "".join(_base_lines(repo, old, n)) for n in names}
    proj = root / "project"
    (proj / "recipes").mkdir(parents=True)
    (proj / "patches").mkdir()
    work = {n: base[n].splitlines(keepends=True) for n in names}
    series = []
    for k in range(n_patches):
        before = {n: list(v) for n, v in work.items()}
        for n in rng.sample(names[:8], rng.randint(1, 3)):
            for _ in range(rng.randint(1, 2)):
                i = rng.randrange(10, len(work[n]) - 10)
                work[n].insert(i, f"int patch{k}_{i} = {k}; /* queue */\n")
        diff = _diff(root, before, work)
        fname = f"{k + 1:04d}-synthetic-queue-patch-number-{k + 1}.patch"
        header = "Subject: synthetic\nWhy: bench\nUpstream-Status: pending\nWhen: ..\nDefault: yes\n\n"
        (proj / "patches" / fname).write_text(header + diff)
        series.append(fname)
    import hashlib

    (proj / "patches" / "series").write_text(
        "".join(
            f"{f} sha256={hashlib.sha256((proj / 'patches' / f).read_bytes()).hexdigest()}\n" for f in series
        )
    )
    (proj / "recipes" / "bench.toml").write_text(
        f'name = "bench"\n[upstream]\nurl = "{repo}"\ncommit = "{old}"\n[build]\ntargets = ["x"]\n'
    )
    return repo, proj, old, shas[-1]


def _base_lines(repo: Path, commit: str, name: str) -> str:
    return git(repo, "show", f"{commit}:{name}")


def _diff(root: Path, before: dict[str, list[str]], after: dict[str, list[str]]) -> str:
    out = []
    tmp = root / "diff"
    for n in sorted(before):
        if before[n] == after[n]:
            continue
        a, b = tmp / "a" / n, tmp / "b" / n
        a.parent.mkdir(parents=True, exist_ok=True)
        b.parent.mkdir(parents=True, exist_ok=True)
        a.write_text("".join(before[n]))
        b.write_text("".join(after[n]))
        proc = subprocess.run(
            ["git", "diff", "--no-index", "--", f"a/{n}", f"b/{n}"], cwd=tmp, capture_output=True, text=True
        )
        out.append(proc.stdout.replace(f"a/a/{n}", f"a/{n}").replace(f"b/b/{n}", f"b/{n}"))
    return "".join(out)


def _subset(project: Path, root: Path, n: int | None) -> Path:
    """A copy of the project whose series keeps its first ``n`` patches."""
    if n is None:
        return project
    dest = root / "subset"
    shutil.copytree(project, dest)
    lines = [ln for ln in (dest / "patches" / "series").read_text().splitlines() if ln.split("#")[0].strip()]
    (dest / "patches" / "series").write_text("".join(ln + "\n" for ln in lines[:n]))
    return dest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--synthetic", action="store_true", help="make the repository and queue here")
    ap.add_argument("--repo", type=Path, help="upstream clone or bare mirror")
    ap.add_argument("--project", type=Path, help="a patchkit project holding the queue")
    ap.add_argument("--range", dest="range_", help="OLD..NEW")
    ap.add_argument("--patches", type=int, default=None, help="keep the first N patches (synthetic: 30)")
    ap.add_argument("--commits", type=int, default=None, help="the last N commits (synthetic: 250)")
    ap.add_argument("--before", type=Path, default=None, help="a checkout of the older patchkit to compare")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="check-scale-") as tmp:
        root = Path(tmp)
        if args.synthetic:
            repo, project, old, new = synthetic(root, args.patches or 30, args.commits or 250)
        else:
            if not (args.repo and args.project and args.range_):
                sys.exit("give --synthetic, or --repo, --project and --range")
            repo, project = args.repo.resolve(), _subset(args.project.resolve(), root, args.patches)
            old, _, new = args.range_.partition("..")
            if args.commits:
                chain = git(repo, "rev-list", "--first-parent", f"-n{args.commits + 1}", new).split()
                old = chain[-1] if len(chain) > args.commits else old
        n_commits = len(git(repo, "rev-list", "--first-parent", f"{old}..{new}").split())
        n_patches = len(
            [ln for ln in (project / "patches" / "series").read_text().splitlines() if ln.strip()]
        )
        print(f"repository: {repo}\nrange: {old[:12]}..{new[:12]}: {n_commits} first-parent commits")
        print(f"queue: {n_patches} patches   cores: {os.cpu_count()}   load: {os.getloadavg()[0]:.1f}")
        runs = [("this tree", ROOT)] + ([("before", args.before.resolve())] if args.before else [])
        got = {}
        for label, code in runs:
            wall, cpu, rc, doc = run_check(code, project, repo, old, new)
            got[label] = (wall, cpu, doc)
            extra = f", runs {doc['runs']}" if "runs" in doc else ""
            print(
                f"{label:>10}: {wall:7.2f} s wall {cpu:7.2f} s cpu (exit {rc}; {doc['states']} states{extra})"
            )
        if args.before:
            (w1, c1, d1), (w0, c0, d0) = got["this tree"], got["before"]
            same, total, diffs = compare(d0, d1)
            print(f"     ratio: before / this tree = {w0 / w1:.1f}x wall, {c0 / c1:.1f}x cpu")
            print(f"  verdicts: {same}/{total} the same" + "".join(f"\n    differs: {d}" for d in diffs))
        doc = got["this tree"][2]
        cascades = sum(1 for r in doc["refs"] for v in r["results"] if v.get("cascade_of"))
        last = doc["refs"][-1]["results"]
        bad = sum(v["status"] == "conflicts" for v in last)
        casc = sum(bool(v.get("cascade_of")) for v in last)
        print(f"at {new[:12]}: {bad} conflicting ({casc} of them cascades); {cascades} cascades in all")


if __name__ == "__main__":
    main()
