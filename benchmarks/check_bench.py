"""Benchmark `patchkit check` against the naive way, on one repository, in one run.

    python3 benchmarks/check_bench.py --repo /path/to/llama.cpp.git --patches DIR \\
        [--new REF] [--n 100] [--naive-sample 10] [--bisect-span 2000]

DIR holds a ``series`` file and its patches. Three measurements:

1. ``patchkit check --all --range NEW~N..NEW`` (end to end: a fresh Python
   process, as a user or CI runs it) against the N first-parent commits.
2. The naive script: one clone with a worktree, then per commit
   ``git checkout -f C && git apply --check P1 P2 ...``. Timed on an evenly spread
   sample of the N commits and extrapolated to N (said so in the output); the
   one-off clone + first checkout is reported separately and left out of the ratio.
   The sample's verdicts are compared with patchkit's.
3. ``patchkit check --all --range NEW~SPAN..NEW --bisect`` over a long range.

The repository is only read: the naive clone is a ``--shared`` clone in a temp dir.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-C", str(repo), *args],
        capture_output=True,
        text=True,
        check=check,
        env={**os.environ, "LC_ALL": "C"},
    )


def patchkit(project: Path, *args: str) -> tuple[float, int, dict]:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "patchkit", "--project", str(project), *args],
        capture_output=True,
        text=True,
        env=env,
    )
    took = time.perf_counter() - start
    if proc.returncode not in (0, 11):
        sys.exit(f"patchkit failed ({proc.returncode}):\n{proc.stderr}")
    return took, proc.returncode, json.loads(proc.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", type=Path, required=True, help="upstream clone or bare mirror")
    ap.add_argument("--patches", type=Path, required=True, help="folder with series + patches")
    ap.add_argument("--new", default="HEAD", help="newest commit (default HEAD)")
    ap.add_argument("--n", type=int, default=100, help="first-parent commits to check")
    ap.add_argument("--naive-sample", type=int, default=10, help="commits the naive way runs on")
    ap.add_argument("--bisect-span", type=int, default=2000, help="first-parent commits to bisect")
    ap.add_argument(
        "--sparse-exclude",
        action="append",
        default=["/models/*.gguf", "/docs/ops/*.csv"],
        help="paths the naive checkout leaves out (blobs a mirror may lack)",
    )
    args = ap.parse_args()

    repo = args.repo.resolve()
    new = git(repo, "rev-parse", "--verify", f"{args.new}^{{commit}}").stdout.strip()
    first_parent = git(repo, "rev-list", "--first-parent", f"-n{args.bisect_span + 1}", new).stdout.split()
    if len(first_parent) <= args.n:
        sys.exit(f"{args.new} has only {len(first_parent) - 1} first-parent ancestors")
    commits = list(reversed(first_parent[: args.n]))  # oldest first, NEW last
    old = first_parent[args.n]
    series = [
        ln.split()[0]
        for ln in (args.patches / "series").read_text().splitlines()
        if ln.split("#", 1)[0].strip()
    ]

    with tempfile.TemporaryDirectory(prefix="check-bench-") as tmp:
        tmpdir = Path(tmp)
        project = tmpdir / "project"
        (project / "recipes").mkdir(parents=True)
        shutil.copytree(args.patches, project / "patches")
        print(f"repository: {repo}\nnewest: {new[:12]}  patches: {', '.join(series)}")
        print(f"cores: {os.cpu_count()}  load: {os.getloadavg() if hasattr(os, 'getloadavg') else '?'}")

        # 1. patchkit over N commits
        t_pk, rc, doc = patchkit(
            project, "check", "--all", "--repo", str(repo), "--range", f"{old}..{new}", "--json"
        )
        verdicts = {r["commit"]["sha"]: [x["status"] for x in r["results"]] for r in doc["refs"]}
        assert list(verdicts) == commits, "patchkit checked other commits than expected"
        print(
            f"\n[1] patchkit check, {len(series)} patches x {args.n} commits: {t_pk:.2f} s "
            f"(exit {rc}; {doc['states']} distinct file states went through git apply)"
        )

        # 2. the naive way, on a sample
        naive = tmpdir / "naive"
        t0 = time.perf_counter()
        git(tmpdir, "clone", "-q", "--shared", "--no-checkout", str(repo), str(naive))
        git(naive, "sparse-checkout", "set", "--no-cone", "/*", *[f"!{p}" for p in args.sparse_exclude])
        git(naive, "checkout", "-q", "-f", commits[0])
        t_setup = time.perf_counter() - t0
        step = max(1, len(commits) // args.naive_sample)
        sample = commits[::step][: args.naive_sample]
        pfiles = [str(project / "patches" / f) for f in series]
        agree = 0
        t0 = time.perf_counter()
        for c in sample:
            git(naive, "checkout", "-q", "-f", c)
            ok = git(naive, "apply", "--check", *pfiles, check=False).returncode == 0
            # naive "the series applies" = every patch applies (with or without offset)
            agree += ok == all(s in ("applies", "applies-with-offset") for s in verdicts[c])
        t_sample = time.perf_counter() - t0
        per = t_sample / len(sample)
        t_naive = per * args.n
        print(
            f"[2] naive (checkout + git apply --check): one-off clone+checkout {t_setup:.2f} s; "
            f"{per * 1000:.0f} ms/commit measured on {len(sample)} of the {args.n} commits, "
            f"extrapolated to {args.n}: {t_naive:.1f} s"
        )
        print(f"    verdicts agree with patchkit on {agree}/{len(sample)} sampled commits")
        print(
            f"    ratio naive/patchkit: {t_naive / t_pk:.1f}x "
            f"(including the one-off clone: {(t_naive + t_setup) / t_pk:.1f}x)"
        )

        # 3. bisect over a long range
        span = len(first_parent) - 1
        t_bi, rc, bdoc = patchkit(
            project,
            "check",
            "--all",
            "--repo",
            str(repo),
            "--range",
            f"{first_parent[span]}..{new}",
            "--bisect",
            "--json",
        )
        print(
            f"\n[3] bisect over {bdoc['range_size']} first-parent commits: {t_bi:.2f} s, "
            f"{bdoc['probes']} commits probed (exit {rc})"
        )
        for r in bdoc["results"]:
            bad = r["first_bad"]
            where = f" at {bad['sha'][:12]} {bad['date']} {bad['subject'][:60]}" if bad else ""
            files = f" (touched {', '.join(r['files'])})" if r["files"] else ""
            print(f"    {r['patch']}: {r['verdict']}{where}{files}")

        print(
            f"\nsummary: check {args.n} commits {t_pk:.2f} s vs naive ~{t_naive:.1f} s "
            f"= {t_naive / t_pk:.1f}x; bisect {bdoc['range_size']} commits {t_bi:.2f} s"
        )


if __name__ == "__main__":
    main()
