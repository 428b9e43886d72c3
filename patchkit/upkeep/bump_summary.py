"""The markdown summary of a bump for a pull-request body (:func:`render_summary`).

Every text from outside is a code span (:func:`md_code`, through core.text.printable): an
upstream subject cannot mention, link, embed or break the table; upstream's ``(#N)`` is a
link to *its* pull request when it is on GitHub; the upstream URL is shown without
credentials."""

from __future__ import annotations

import re
from collections.abc import Sequence

from patchkit.core.redact import redact_url
from patchkit.core.text import printable
from patchkit.git.repo import CommitInfo
from patchkit.spec.rpcproto import judge
from patchkit.upkeep.bump import BumpResult
from patchkit.upkeep.compile_errors import PatchErrors
from patchkit.upkeep.scratch import PatchVerdict, Status

__all__ = ["md_code", "render_summary"]

_PR = re.compile(r"\s*\(#(\d{1,9})\)")
_MAX_ERRORS = 50  # per patch, in the summary


def _verdict_cell(v: PatchVerdict) -> tuple[str, str]:
    if v.status is Status.OFFSET:
        by_file: dict[str, list[str]] = {}
        for o in v.offsets:
            by_file.setdefault(o.file, []).append(f"#{o.hunk} {o.lines:+d}")
        return v.status.value, "; ".join(f"{f}: {', '.join(h)}" for f, h in by_file.items())
    if v.status is Status.CONFLICTS:
        return v.status.value, ", ".join(c.where for c in v.conflicts) or "-"
    return v.status.value, "-"


def md_code(text: str, *, cell: bool = False) -> str:
    """Text from outside (upstream's subjects, refs and URLs; patch and file names; messages)
    as a markdown code span: shown as it is, never markup (no link, image or HTML), and
    GitHub makes no @mention, #reference or autolink of it. Control characters are escaped
    (core.text.printable); a backtick, which would end the span, becomes '; ``cell``: in a
    table cell, where ``|`` must be escaped even inside a span."""
    body = printable(text).replace("`", "'").strip() or "-"
    if cell:
        body = body.replace("|", "\\|")
    return f"`{body}`"


def _subject(subject: str, web: str, *, cell: bool = False) -> str:
    """A commit subject: a code span, its ``(#N)`` pull-request references as links to the
    upstream's pull request on GitHub (on GitHub itself ``#N`` would name the *project's*
    issue N), or kept in the span as plain text when the upstream is not on GitHub."""
    if not web:
        return md_code(subject, cell=cell)
    prs = _PR.findall(subject)
    rest = _PR.sub("", subject)
    links = "".join(f" ([#{n}]({web}/pull/{n}))" for n in prs)
    return md_code(rest, cell=cell) + links


def _commit(c: CommitInfo, web: str, *, full: bool = False) -> str:
    label = f"`{c.sha if full else c.short}`"
    return f"[{label}]({web}/commit/{c.sha})" if web and re.fullmatch(r"[0-9a-f]{40}", c.sha) else label


def _upstreamed_lines(result: BumpResult, web: str) -> list[str]:
    """The patches the refresh dropped (already upstream, ``--skip``, ``--drop``) and those
    found upstream but kept (proposed for dropping), each with the upstream commit that
    has it: a reviewer sees why the series got shorter."""
    r = result.refresh
    if r is None or not (r.dropped or r.upstream):
        return []
    out = ["", "### Patches dropped or found upstream", ""]
    for d in r.dropped:
        at = f" {_commit(d.commit, web)} {_subject(d.commit.subject, web)}" if d.commit else ""
        out.append(f"- {md_code(d.file)} dropped: {md_code(d.reason)}{at}")
    for u in r.upstream:
        rule = u.rule + (f" {u.detail}" if u.detail else "")
        at = f" {_commit(u.commit, web)} {_subject(u.commit.subject, web)}" if u.commit else ""
        out.append(
            f"- {md_code(u.file)} kept, though upstream has it ({md_code(rule)}):{at}; "
            "`--drop-upstreamed` drops it"
        )
    return out


def _review_lines(result: BumpResult) -> list[str]:
    """The patches that merged cleanly but are to be reviewed, and why."""
    r = result.refresh
    if r is None or not r.review:
        return []
    out = ["", "### Merged cleanly, review", ""]
    for rv in r.review:
        out.append(f"- {md_code(rv.file)}")
        out += [f"  - {md_code(f.text)}" for f in rv.findings[:_MAX_ERRORS]]
        if len(rv.findings) > _MAX_ERRORS:
            out.append(f"  - … and {len(rv.findings) - _MAX_ERRORS} more")
    return out


def render_summary(
    result: BumpResult, *, build_lines: Sequence[str] = (), errors: Sequence[PatchErrors] = ()
) -> str:
    """Markdown for a pull-request body: what moved, what changed upstream, the verdicts;
    ``errors``: a failed build's compile errors in patched code, per patch.

    Every text from outside is a code span (:func:`md_code`): an upstream subject cannot
    mention, link, embed or break the table; upstream's ``(#N)`` is a link to *its* pull
    request when it is on GitHub; the upstream URL is shown without credentials."""
    p = result.plan
    old, new = p.old, p.new
    web = p.web
    lines = [f"## Bump llama.cpp {old.short} (build {p.old_build}) → {new.short} (build {p.new_build})", ""]
    if p.up_to_date:
        return "\n".join([*lines, f"Already at the newest commit of {md_code(p.target)}: nothing to do.", ""])
    state = (
        "dry run: nothing was written"
        if result.dry_run
        else "stopped at a conflict: nothing was written yet"
        if result.stopped
        else "patches refreshed and every pin moved"
    )
    lines += [
        "| | commit | date | build | RPC protocol |",
        "|---|---|---|---|---|",
        f"| old | {_commit(old, web, full=True)} | {old.date[:10]} | {p.old_build} | {p.rpc_old or '-'} |",
        f"| new | {_commit(new, web, full=True)} | {new.date[:10]} | {p.new_build} | {p.rpc_new or '-'} |",
        "",
        f"Target: {md_code(p.target)} of {md_code(redact_url(p.upstream))}: {_subject(new.subject, web)}. "
        f"{p.commits} commits in between ({p.first_parent} first-parent). Status: {state}.",
    ]
    if p.rpc_old and p.rpc_new and p.rpc_old != p.rpc_new:
        fwd, back = judge(p.rpc_new, p.rpc_old), judge(p.rpc_old, p.rpc_new)
        lines += [
            "",
            f"**RPC protocol {p.rpc_old} → {p.rpc_new}.** New clients with old "
            f"servers: {'ok' if fwd.ok else 'refused'}; old clients with new servers: "
            f"{'ok' if back.ok else 'refused'}. Rebuild every RPC node of a rig "
            "from the same pin.",
        ]
    lines += [
        "",
        "### Patches at the new commit",
        "",
        "| patch | verdict | offsets / conflicts | refresh |",
        "|---|---|---|---|",
    ]
    refreshed: dict[str, str] = {}
    if result.refresh is not None:
        for f in result.refresh.updated:
            refreshed[f] = "rewritten"
        for f in result.refresh.unchanged:
            refreshed[f] = "unchanged"
        for f in result.refresh.skipped:
            refreshed[f] = "skipped (outside When)"
        for d in result.refresh.dropped:
            refreshed[d.file] = "dropped"
    files_of = dict(p.patch_files)
    for v in p.verdicts:
        verdict, where = _verdict_cell(v)
        how = refreshed.get(files_of.get(v.patch, ""), "stopped" if result.stopped else "-")
        if how == "rewritten" and v.status is Status.CONFLICTS:
            how = "rewritten (3-way merge)"
        if result.dry_run and how.startswith(("rewritten", "unchanged")):
            how = f"would be {how}"
        lines.append(f"| {md_code(v.patch, cell=True)} | {verdict} | {md_code(where, cell=True)} | {how} |")
    if result.stopped:
        lines += ["", f"Refresh: {md_code(result.stopped)}"]
    lines += _upstreamed_lines(result, web)
    files = ", ".join(md_code(f) for f in p.files) or "-"
    lines += [
        "",
        f"### Upstream commits that touched the patched files ({p.touching_total})",
        "",
        f"Files: {files}",
        "",
    ]
    if not p.touching:
        lines.append("None.")
    for t in p.touching:
        where = ", ".join(md_code(f) for f in t.files)
        lines.append(
            f"- {_commit(t.commit, web)} {t.commit.date[:10]} {_subject(t.commit.subject, web)} ({where})"
        )
    if p.touching_total > len(p.touching):
        lines.append(f"- … and {p.touching_total - len(p.touching)} more")
    verb = "would move" if result.dry_run else "moved" if result.moved else "to move"
    lines += ["", f"### Recipes ({verb} together)", "", *(f"- {n}" for n in sorted(p.recipes))]
    lines += _review_lines(result)
    if build_lines:
        lines += ["", "### Build", "", *build_lines]
    if errors:
        lines += ["", "### Compile errors in patched code", ""]
        for pe in errors:
            lines.append(f"- {md_code(pe.patch)}: {len(pe.errors)} error(s) in lines its hunks cover")
            for e in pe.errors[:_MAX_ERRORS]:
                at = f"{e.file}:{e.line}" + (f":{e.col}" if e.col else "")
                lines.append(f"  - {md_code(at)}: {md_code(e.message)}")
            if len(pe.errors) > _MAX_ERRORS:
                lines.append(f"  - … and {len(pe.errors) - _MAX_ERRORS} more (the build log has all)")
    return "\n".join(lines) + "\n"
