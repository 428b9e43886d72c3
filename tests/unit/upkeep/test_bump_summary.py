"""bump's pull-request summary from a synthetic plan: what it says, and that text from
upstream (commit subjects) cannot break the markdown."""

from __future__ import annotations

from pathlib import Path

from patchkit.git.repo import CommitInfo
from patchkit.spec.patchfile import Offset
from patchkit.spec.rpcproto import ProtoVersion
from patchkit.upkeep.bump import BumpPlan, BumpResult, Touching
from patchkit.upkeep.bump_summary import render_summary
from patchkit.upkeep.refresh import Dropped, RefreshResult
from patchkit.upkeep.scratch import PatchVerdict, Status
from patchkit.upkeep.upstreamed import Upstreamed

OLD = CommitInfo(sha="8" * 40, date="2026-08-07T10:00:00+00:00", subject="old")
NEW = CommitInfo(sha="b" * 40, date="2026-08-21T10:00:00+00:00", subject="llama.cpp : bump | version <b>")


def plan(**kw: object) -> BumpPlan:
    base: dict[str, object] = dict(
        upstream="https://github.com/ggml-org/llama.cpp",
        target="master",
        old=OLD,
        new=NEW,
        old_build=10309,
        new_build=10566,
        first_parent=257,
        commits=257,
        touching=(
            Touching(
                commit=CommitInfo(
                    sha="a" * 40, date="2026-08-18T00:00:00+00:00", subject="RPC: use_count | `fusion`"
                ),
                files=("ggml/src/ggml-rpc/ggml-rpc.cpp",),
            ),
        ),
        touching_total=1,
        files=("ggml/src/ggml-rpc/ggml-rpc.cpp",),
        verdicts=(
            PatchVerdict(
                patch="guard",
                status=Status.OFFSET,
                offsets=(
                    Offset(file="ggml/src/ggml-rpc/ggml-rpc.cpp", hunk=1, lines=5),
                    Offset(file="ggml/src/ggml-rpc/ggml-rpc.cpp", hunk=2, lines=5),
                ),
            ),
        ),
        rpc_old=ProtoVersion(major=5, minor=0, patch=0),
        rpc_new=ProtoVersion(major=5, minor=1, patch=0),
        recipes=("cpu-rpc", "cpu-rpc-experimental"),
        recipe_paths=(Path("/p/recipes/cpu-rpc.toml"),),
        patch_files=(("guard", "0001-guard.patch"),),
        web="https://github.com/ggml-org/llama.cpp",
    )
    base.update(kw)
    return BumpPlan(**base)  # type: ignore[arg-type]


def test_summary_says_what_moved_and_why() -> None:
    r = BumpResult(
        plan=plan(),
        dry_run=False,
        refresh=RefreshResult(
            onto=NEW.sha, updated=("0001-guard.patch",), unchanged=(), outside_when=(), pin_moved=True
        ),
        moved=("cpu-rpc", "cpu-rpc-experimental"),
    )
    md = render_summary(r, build_lines=["`patchkit build cpu-rpc`: ok"])
    assert md.startswith("## Bump llama.cpp 888888888888 (build 10309) → bbbbbbbbbbbb (build 10566)\n")
    web = "https://github.com/ggml-org/llama.cpp"
    assert f"| old | [`{OLD.sha}`]({web}/commit/{OLD.sha}) | 2026-08-07 | 10309 | 5.0.0 |" in md
    assert (
        "| `guard` | applies-with-offset | `ggml/src/ggml-rpc/ggml-rpc.cpp: #1 +5, #2 +5` | rewritten |" in md
    )
    assert "old clients with new servers: refused" in md
    assert "### Recipes (moved together)\n\n- cpu-rpc\n- cpu-rpc-experimental\n" in md
    assert md.endswith("### Build\n\n`patchkit build cpu-rpc`: ok\n")
    # upstream's text is a code span: no broken table, no HTML, its own backticks made '
    assert "`llama.cpp : bump | version <b>`" in md
    assert "`RPC: use_count | 'fusion'`" in md


def test_same_protocol_and_nothing_to_do() -> None:
    same = plan(rpc_new=ProtoVersion(major=5, minor=0, patch=0))
    md = render_summary(BumpResult(plan=same, dry_run=True))
    assert "**RPC protocol" not in md and "would move" in md
    done = render_summary(BumpResult(plan=plan(new=OLD, new_build=10309), dry_run=False))
    assert "Already at the newest commit of `master`: nothing to do." in done


HOSTILE = (
    "rpc: fix (#1) cc @octocat [click me](https://evil.example/x) "
    "![t](https://evil.example/p.png) <img src=x> \x1b]0;pwned\x07\x1b[2J done (#27142)"
)


def test_hostile_subjects_are_inert_markdown_and_no_escapes() -> None:
    """An upstream subject cannot mention, link, embed, inject HTML
    or reach the terminal as escape sequences; its (#N) links to upstream's pull request."""
    touch = Touching(
        commit=CommitInfo(sha="c" * 40, date="2026-08-19T00:00:00+00:00", subject=HOSTILE), files=("a|b.c",)
    )
    new = CommitInfo(sha="d" * 40, date="2026-08-21T10:00:00+00:00", subject=HOSTILE)
    md = render_summary(BumpResult(plan=plan(new=new, touching=(touch,)), dry_run=True))
    assert "\x1b" not in md and "\x07" not in md
    assert "\\x1b]0;pwned\\x07" in md  # shown, escaped
    web = "https://github.com/ggml-org/llama.cpp"
    # outside code spans only patchkit's own links: to upstream's commits and pull requests
    outside = "".join(md.split("`")[::2])
    assert "@octocat" not in outside and "evil.example" not in outside and "<img" not in outside
    assert "](" not in outside.replace(f"]({web}/commit/", "").replace(f"]({web}/pull/", "")
    (line,) = [ln for ln in md.splitlines() if ln.startswith("- [`cccccccccccc`]")]
    assert line.startswith(f"- [`cccccccccccc`]({web}/commit/{'c' * 40}) 2026-08-19 `rpc: fix cc @octocat")
    assert line.endswith(f"done` ([#1]({web}/pull/1)) ([#27142]({web}/pull/27142)) (`a|b.c`)")
    # a code span cannot be closed early: upstream's backticks are gone
    assert md.count("`") % 2 == 0


def test_not_on_github_no_links_and_no_credentials() -> None:
    p = plan(upstream="https://user:s3cret-TOKEN@git.example.org/llama.cpp.git?token=abc", web="")
    md = render_summary(BumpResult(plan=p, dry_run=True))
    assert "s3cret-TOKEN" not in md and "token=abc" not in md
    assert "`https://***@git.example.org/llama.cpp.git?token=***`" in md
    assert "](" not in md  # nothing linked: upstream is not on GitHub, (#N) stays plain text
    new = CommitInfo(sha="d" * 40, date="2026-08-21T10:00:00+00:00", subject="x: y (#12)")
    md = render_summary(BumpResult(plan=plan(new=new, web=""), dry_run=True))
    assert "`x: y (#12)`" in md


def test_github_web_address() -> None:
    from patchkit.upkeep.bump import github_web

    base = "https://github.com/ggml-org/llama.cpp"
    for url in (
        "https://github.com/ggml-org/llama.cpp",
        "https://github.com/ggml-org/llama.cpp.git",
        "https://user:TOKEN@github.com/ggml-org/llama.cpp/",
        "git@github.com:ggml-org/llama.cpp.git",
        "ssh://git@github.com/ggml-org/llama.cpp",
    ):
        assert github_web(url) == base, url
    for url in (
        "https://gitlab.com/a/b",
        "/srv/mirror/llama.cpp",
        "https://github.com/a",
        "https://evil/github.com/a/b",
    ):
        assert github_web(url) == "", url


def _series(tmp: Path, bodies: list[tuple[str, str]]) -> list[object]:
    from patchkit.core.fs import sha256_file
    from patchkit.spec.series import load_series

    pdir = tmp / "patches"
    pdir.mkdir()
    lines = []
    for name, body in bodies:
        f = pdir / name
        f.write_text(f"Subject: {name}\nWhy: t\nUpstream-Status: pending\nWhen: ..\nDefault: yes\n\n" + body)
        lines.append(f"{name} sha256={sha256_file(f)}\n")
    (pdir / "series").write_text("".join(lines))
    return list(load_series(pdir).patches)


def test_compile_errors_map_to_the_patch_whose_hunk_covers_the_line(tmp_path: Path) -> None:
    """FILE:LINE:COL errors of a failed build, per patch, with the lines a
    later patch moved followed; errors outside every hunk, or in other files, left out."""
    from patchkit.upkeep.compile_errors import compile_errors

    first = (
        "diff --git a/src/a.c b/src/a.c\n--- a/src/a.c\n+++ b/src/a.c\n"
        "@@ -20,3 +20,5 @@ ctx\n x\n y\n+uses_old_name();\n+more();\n z\n"
    )
    # adds 3 lines near the top: the first patch's lines 20-24 are now 23-27
    second = "diff --git a/src/a.c b/src/a.c\n--- a/src/a.c\n+++ b/src/a.c\n@@ -2,2 +2,5 @@\n a\n+b1\n+b2\n+b3\n c\n"
    patches = _series(tmp_path, [("0001-first.patch", first), ("0002-second.patch", second)])
    src = tmp_path / "work" / "src"
    log = "\n".join(
        [
            "[12/40] Building C object src/a.c.o",
            "FAILED: src/a.c.o",
            f"{src}/src/a.c:25:5: error: implicit declaration of function 'uses_old_name'",
            f"{src}/src/a.c:25:5: error: implicit declaration of function 'uses_old_name'",  # twice: once
            f"{src}/src/a.c:3:1: error: unknown type name 'b1'",
            "../src/src/a.c:60:2: error: far from every hunk",
            f"{src}/src/other.c:1:1: error: a file no patch touches",
            "/elsewhere/src/a.c:25:1: error: outside the source tree",
            f"{src}/src/a.c:24:9: warning: a warning is no error",
        ]
    )
    got = compile_errors(log, patches, src=src, build=tmp_path / "work" / "build")  # type: ignore[arg-type]
    assert [(pe.patch, [(e.file, e.line, e.col) for e in pe.errors]) for pe in got] == [
        ("first", [("src/a.c", 25, 5)]),
        ("second", [("src/a.c", 3, 1)]),
    ]
    assert got[0].errors[0].message == "implicit declaration of function 'uses_old_name'"
    r = BumpResult(plan=plan(), dry_run=False, moved=("cpu-rpc",))
    md = render_summary(r, build_lines=["`patchkit build cpu-rpc`: **failed**"], errors=got)
    assert "### Compile errors in patched code\n\n- `first`: 1 error(s) in lines its hunks cover\n" in md
    assert "  - `src/a.c:25:5`: `implicit declaration of function 'uses_old_name'`\n" in md


def test_compile_errors_cover_a_patch_to_review_where_they_name_a_function_it_calls(tmp_path: Path) -> None:
    """A clean merge the refresh listed for review (it calls build_attn, whose declaration
    upstream changed): an error in a file it patches that names build_attn is its, though
    the call lies outside its hunks; another patch's file, or another name, is not."""
    from patchkit.upkeep.compile_errors import compile_errors
    from patchkit.upkeep.refresh import Review
    from patchkit.upkeep.refresh.review import Finding

    body = "diff --git a/src/m.cpp b/src/m.cpp\n--- a/src/m.cpp\n+++ b/src/m.cpp\n@@ -20,2 +20,3 @@\n x\n+y();\n z\n"
    other = "diff --git a/src/o.cpp b/src/o.cpp\n--- a/src/o.cpp\n+++ b/src/o.cpp\n@@ -1,2 +1,3 @@\n a\n+b();\n c\n"
    patches = _series(tmp_path, [("0001-model.patch", body), ("0002-other.patch", other)])
    src = tmp_path / "src"
    log = "\n".join(
        [
            f"{src}/src/m.cpp:400:9: error: no matching function for call to 'ctx::build_attn(int*&, graph*&)'",
            f"{src}/src/m.cpp:410:9: error: 'foo' was not declared in this scope",
            f"{src}/src/o.cpp:90:1: error: no matching function for call to 'build_attn'",
        ]
    )
    review = {"0001-model.patch": ("build_attn",)}
    got = compile_errors(log, patches, src=src, review=review)  # type: ignore[arg-type]
    assert [(pe.patch, [e.line for e in pe.errors]) for pe in got] == [("model", [400])]
    assert compile_errors(log, patches, src=src) == ()  # type: ignore[arg-type]
    # and the summary lists the clean merges to review
    finding = Finding(
        kind="api", path="src/m.cpp", text="src/m.cpp: calls build_attn(), ...", name="build_attn"
    )
    r = BumpResult(
        plan=plan(),
        dry_run=False,
        moved=("cpu-rpc",),
        refresh=RefreshResult(
            onto=NEW.sha,
            updated=("0001-model.patch",),
            unchanged=(),
            outside_when=(),
            pin_moved=True,
            review=(Review(file="0001-model.patch", findings=(finding,)),),
        ),
    )
    md = render_summary(r)
    assert (
        "### Merged cleanly, review\n\n- `0001-model.patch`\n  - `src/m.cpp: calls build_attn(), ...`\n" in md
    )


def test_dropped_and_upstream_patches_are_listed_with_their_commits() -> None:
    up = CommitInfo(sha="c" * 40, date="2026-08-19T00:00:00+00:00", subject="rpc: guard @octocat (#16769)")
    r = BumpResult(
        plan=plan(),
        dry_run=False,
        refresh=RefreshResult(
            onto=NEW.sha,
            updated=(),
            unchanged=(),
            outside_when=(),
            pin_moved=True,
            dropped=(Dropped(file="0001-guard.patch", reason="already upstream (patch-id)", commit=up),),
            upstream=(Upstreamed(file="0002-other.patch", rule="pull-request", commit=up, detail="#16769"),),
        ),
        moved=("cpu-rpc",),
    )
    md = render_summary(r)
    web = "https://github.com/ggml-org/llama.cpp"
    assert "| `guard` | applies-with-offset |" in md and md.split("| `guard` |")[1].split("\n")[0].endswith(
        "| dropped |"
    )
    section = md.split("### Patches dropped or found upstream\n\n")[1].split("\n\n")[0].splitlines()
    assert section[0].startswith("- `0001-guard.patch` dropped: `already upstream (patch-id)` ")
    assert f"({web}/commit/{up.sha})" in section[0]
    # upstream's subject is inert (a code span) and its (#N) links to upstream's pull request
    assert "`rpc: guard @octocat`" in section[0] and f"({web}/pull/16769)" in section[0]
    assert section[1].startswith("- `0002-other.patch` kept, though upstream has it (`pull-request #16769`):")
    assert section[1].endswith("`--drop-upstreamed` drops it")


def test_no_section_when_nothing_was_dropped() -> None:
    r = BumpResult(
        plan=plan(),
        dry_run=False,
        refresh=RefreshResult(onto=NEW.sha, updated=(), unchanged=(), outside_when=(), pin_moved=True),
        moved=("cpu-rpc",),
    )
    assert "dropped or found upstream" not in render_summary(r)
