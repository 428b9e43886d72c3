"""`patchkit series`: verify the series' hashes; --rehash after editing a patch on purpose."""

from __future__ import annotations

import json
from pathlib import Path

from patchkit.core.fs import sha256_file
from tests.fixtures.project import assert_error, invoke


def test_series_verifies_and_rehash_records_an_edit(project: Path) -> None:
    r = invoke(project, "series")
    assert r.exit_code == 0, r.output
    assert r.stdout == (  # the result on stdout, nothing on stderr
        "✓ 0001-zero-nbytes-guard.patch: sha256 ok, pending, when ..\n1 patch(es) verified\n"
    )
    assert r.stderr == ""
    patch = project / "patches" / "0001-zero-nbytes-guard.patch"
    patch.write_text(patch.read_text().replace("zero-byte views", "zero byte views"))
    r = invoke(project, "series")
    assert_error(r, 5, "sha256 is", "the series records")
    assert r.stdout == "" and "error: " in r.stderr
    before = (project / "patches" / "series").read_text()
    r = invoke(project, "series", "--rehash")
    assert r.exit_code == 0, r.output
    old = before.split("sha256=")[1][:12]
    assert r.stdout.splitlines()[0].startswith(f"0001-zero-nbytes-guard.patch: {old} -> ")
    assert "✓ 0001-zero-nbytes-guard.patch: sha256 ok" in r.stdout and r.stderr == ""
    after = (project / "patches" / "series").read_text()
    assert after != before and after.startswith("# fixture series\n")  # comments kept
    assert invoke(project, "series").exit_code == 0


def test_series_outside_a_project_is_a_usage_error(tmp_path: Path) -> None:
    r = invoke(tmp_path, "series")
    assert r.exit_code == 2 and "is not a patchkit project" in r.output


def test_series_json(project: Path) -> None:
    r = invoke(project, "series", "--json")
    assert r.exit_code == 0, r.output
    assert r.stderr == ""
    data = json.loads(r.stdout)
    assert data["schema"] == 1 and data["rehashed"] is None  # no --rehash: null, not []
    (p,) = data["patches"]
    assert set(p) == {
        "file",
        "name",
        "sha256",
        "upstream_status",
        "when",
        "default",
        "experimental",
        "kind",
        "author",
        "date",
        "derived",
    }
    assert p["file"] == "0001-zero-nbytes-guard.patch" and p["when"] == ".." and len(p["sha256"]) == 64
    # patchkit's own form: no author, nothing derived
    assert (p["kind"], p["author"], p["date"], p["derived"]) == ("patchkit", None, None, [])
    r = invoke(project, "series", "--rehash", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["rehashed"] == []  # nothing changed
    patch = project / "patches" / "0001-zero-nbytes-guard.patch"
    patch.write_text(patch.read_text().replace("zero-byte views", "zero byte views"))
    r = invoke(project, "series", "--json")
    assert r.exit_code == 5 and r.stdout == ""  # no half result
    r = invoke(project, "series", "--rehash", "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    (c,) = data["rehashed"]
    assert c["file"] == "0001-zero-nbytes-guard.patch" and c["old"] == p["sha256"]
    assert c["new"] == data["patches"][0]["sha256"] != p["sha256"]


# -- import and export (files only; git am and ranges: tests/integration/upkeep/test_queue.py)


def _queue_files() -> list[Path]:
    from tests.fixtures.queue import QUEUE_DATA

    return sorted(QUEUE_DATA.glob("*.patch"))


def test_import_and_export_are_subcommands_with_their_own_help(project: Path) -> None:
    for sub, needle in (("import", "--range BASE..BRANCH"), ("export", "--to-branch NAME")):
        r = invoke(project, "series", sub, "--help")
        assert r.exit_code == 0 and f" series {sub} [OPTIONS]" in r.stdout and needle in r.stdout
    r = invoke(project, "series", "--help")
    assert r.exit_code == 0 and "import" in r.stdout and "export" in r.stdout
    r = invoke(project, "series", "imprt")
    assert (
        r.exit_code == 2
        and "No such command 'imprt' (did you mean \"import\"?)" in r.stderr
        and r.stdout == ""
    )
    r = invoke(project, "series", "--json", "import", str(_queue_files()[0]))
    assert_error(r, 2, "--rehash and --json go with `patchkit series` alone")
    r = invoke(project, "series", "import")
    assert_error(r, 2, "import one of: PATHS..., --series-file FILE, --from URL_OR_PATH --range BASE..BRANCH")
    r = invoke(project, "series", "import", "--from", str(project))
    assert_error(r, 2, "--from and --range go together")
    r = invoke(project, "series", "export")
    assert_error(r, 2, "export to OUTDIR, --to-branch NAME, or both")


def test_import_a_folder_then_the_series_verifies_and_nothing_is_replaced_unasked(project: Path) -> None:
    from tests.fixtures.queue import QUEUE_DATA

    before = (project / "patches" / "series").read_bytes()
    r = invoke(project, "series", "import", str(QUEUE_DATA))
    assert_error(r, 2, "already lists 1 patch(es): not replacing the series", "--replace")
    assert (project / "patches" / "series").read_bytes() == before
    assert not (project / "patches" / _queue_files()[0].name).exists()  # nothing half written
    r = invoke(project, "series", "import", str(QUEUE_DATA), "--replace", "--base", "0123456")
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[0] == (
        f"✓ {_queue_files()[0].name} (from {_queue_files()[0]}): by Jöhannes Gäßler <jg@example.invalid>, "
        "Thu, 6 Nov 2025 10:00:00 +0100; stated When 0123456..; derived Why, Upstream-Status pending, Default yes"
    )
    assert "derived Why, Default yes" in lines[3]  # its trailer states Upstream-Status
    assert lines[-2:] == [
        "  0001-zero-nbytes-guard.patch: no longer in the series (left in patches/)",
        f"5 patch(es) imported into {project / 'patches'} (series written)",
    ]
    assert (project / "patches" / "0001-zero-nbytes-guard.patch").exists()
    # the files are the mails plus the one stated trailer: in the trailer block, or a
    # paragraph of its own after the message (or as the message, after a title alone)
    when = b"Patchkit-When: 0123456..\n"
    guard, notes, move, table, table2 = (m.read_bytes() for m in _queue_files())
    written = [(project / "patches" / m.name).read_bytes() for m in _queue_files()]
    assert written[0] == guard.replace(b"example.invalid>\n---\n", b"example.invalid>\n" + when + b"---\n", 1)
    assert written[1] == notes.replace(b"a date).\n---\n", b"a date).\n\n" + when + b"---\n", 1)
    assert written[2] == move.replace(b"executable\n\n---\n", b"executable\n\n" + when + b"---\n", 1)
    assert written[3] == table.replace(b"pull/7]\n---\n", b"pull/7]\n" + when + b"---\n", 1)
    assert written[4] == table2.replace(b"for sure\n\n---\n", b"for sure\n\n" + when + b"---\n", 1)
    r = invoke(project, "series", "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert [p["kind"] for p in data["patches"]] == ["mail"] * 5
    assert {p["when"] for p in data["patches"]} == {"0123456.."}
    assert data["patches"][2]["author"] == "nobody <>"


def test_import_json_and_names_made_unique(project: Path, tmp_path: Path) -> None:
    src = tmp_path / "q"
    src.mkdir()
    one = _queue_files()[0]
    (src / "0001-same.patch").write_bytes(one.read_bytes())
    (src / "0002-same.patch").write_bytes(one.read_bytes())  # the same name once the number goes
    (src / "series").write_text("0002-same.patch\n0001-same.patch -p1\n")  # quilt's order wins
    r = invoke(project, "series", "import", str(src), "--replace", "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert (
        data["schema"] == 1 and data["base"] is None and data["dropped"] == ["0001-zero-nbytes-guard.patch"]
    )
    first, second = data["patches"]
    assert (first["file"], first["name"], first["renamed"]) == ("0002-same.patch", "same", False)
    assert (second["file"], second["name"], second["renamed"]) == ("0001-same-2.patch", "same-2", True)
    assert first["added"] == {} and first["derived"]["Upstream-Status"] == "pending"
    assert first["derived"]["Why"].startswith("Zero-element views")
    assert (project / "patches" / "series").read_text().startswith("0002-same.patch sha256=")
    (src / "series").write_text("0001-same.patch -R\n")
    r = invoke(project, "series", "import", str(src), "--replace")
    assert_error(r, 5, "option '-R': patchkit applies git diffs with -p1, forwards")


def test_import_refuses_a_hostile_patch_and_writes_nothing(project: Path, tmp_path: Path) -> None:
    bad = tmp_path / "0001-bad.patch"
    bad.write_bytes(
        _queue_files()[1]
        .read_bytes()
        .replace(b"diff --git a/docs/howto.txt b/docs/howto.txt", b"diff --git a/../howto.txt b/../howto.txt")
    )
    before = (project / "patches" / "series").read_bytes()
    r = invoke(project, "series", "import", str(_queue_files()[0]), str(bad), "--replace")
    assert_error(r, 5, f"{bad}: refused: the path '../howto.txt'")
    assert (project / "patches" / "series").read_bytes() == before
    assert not (project / "patches" / _queue_files()[0].name).exists()
    nofrom = tmp_path / "0001-nofrom.patch"
    nofrom.write_bytes(
        _queue_files()[3].read_bytes().replace(b"From: Fixture Author <fixture@example.invalid>\n", b"")
    )
    r = invoke(project, "series", "import", str(nofrom), "--replace")
    assert_error(r, 5, f"{nofrom}: a mail without a From: header")


def test_export_then_import_gives_the_same_series(project: Path, tmp_path: Path) -> None:
    from tests.fixtures.queue import QUEUE_DATA

    assert (
        invoke(project, "series", "import", str(QUEUE_DATA), "--replace", "--base", "0123456").exit_code == 0
    )
    patches = project / "patches"
    (patches / "series").write_text(
        (patches / "series").read_text()
        + f"0001-zero-nbytes-guard.patch sha256={sha256_file(patches / '0001-zero-nbytes-guard.patch')}\n"
    )
    out = tmp_path / "out"
    r = invoke(project, "series", "export", str(out), "--author", "Ann Example <ann@example.invalid>")
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[-1] == f"6 patch(es) written to {out} (and its series file)"
    assert (out / "series").read_text().splitlines() == sorted(p.name for p in out.glob("*.patch"))
    native = (out / "0006-zero-nbytes-guard.patch").read_text()
    assert native.startswith(
        "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\nFrom: Ann Example <ann@example.invalid>\n"
    )
    assert "Subject: [PATCH] rpc: let zero-byte tensors pass the bounds check\n" in native
    # mails are kept as they are: the same bytes (their diffstat is fresh)
    assert (out / "0001-rpc-let-z-ro-byte-views-pass-the-bounds-check.patch").read_bytes() == (
        patches / "0001-rpc-let-z-ro-byte-views-pass-the-bounds-check.patch"
    ).read_bytes()
    again = tmp_path / "again"
    (again / "recipes").mkdir(parents=True)
    (again / "patches").mkdir()
    r = invoke(again, "series", "import", str(out))
    assert r.exit_code == 0, r.output
    from patchkit.spec.series import load_series

    a, b = load_series(patches), load_series(again / "patches")
    assert [p.name for p in a.patches] == [p.name for p in b.patches]
    for p, q in zip(a.patches, b.patches):
        for attr in ("subject", "why", "upstream_status", "when", "default", "experimental", "files"):
            assert getattr(p, attr) == getattr(q, attr), (p.name, attr)
        diff = p.read_verified()[p.read_verified().index(b"\ndiff --git ") :]
        assert diff in q.read_verified()
    # no diffstat, into a folder that holds a previous export: only with --replace
    r = invoke(project, "series", "export", str(out), "--no-diffstat", "--author", "A <a@b>")
    assert_error(r, 2, "already holds 7 file(s): not replacing them", "--replace")
    (out / "0099-stale.patch").write_text("x")
    r = invoke(project, "series", "export", str(out), "--no-diffstat", "--author", "A <a@b>", "--replace")
    assert r.exit_code == 0, r.output
    assert not (out / "0099-stale.patch").exists()
    assert (
        b" 1 file changed"
        not in (out / "0001-rpc-let-z-ro-byte-views-pass-the-bounds-check.patch").read_bytes()
    )
    (out / "notes.txt").write_text("mine")
    r = invoke(project, "series", "export", str(out), "--replace", "--author", "A <a@b>")
    assert_error(r, 2, "holds notes.txt, which an export does not write")
    r = invoke(project, "series", "export", str(patches), "--author", "A <a@b>")
    assert_error(r, 2, "is (or holds) the project's patches/")
    r = invoke(project, "series", "export", str(tmp_path / "x"), "--author", "nobody")
    assert_error(r, 2, "--author 'nobody' must be `Name <mail>`")


def test_untrusted_mail_fields_are_printed_escaped(project: Path, tmp_path: Path) -> None:
    """A mail's author (RFC 2047 hides an ESC in it), date and a file name with a bidi
    override reach the terminal escaped, in import, series and export."""
    src = tmp_path / "in"
    src.mkdir()
    mail = (
        _queue_files()[3]
        .read_bytes()
        .replace(
            b"From: Fixture Author <fixture@example.invalid>\n",
            b"From: =?UTF-8?q?Ann=1B]0;pwned=07?= <ann@example.invalid>\n",
        )
    )
    mail = mail.replace(b"\nDate: ", b"\nDate: \x1b[31m", 1) if b"\nDate: " in mail else mail
    (src / "0001-a\u202eb.patch").write_bytes(mail)
    out = tmp_path / "out"
    for args in (
        ("series", "import", str(src), "--replace"),
        ("series",),
        ("series", "export", str(out)),
    ):
        r = invoke(project, *args)
        assert r.exit_code == 0, r.output
        assert "\x1b" not in r.output and "\x07" not in r.output and "\u202e" not in r.output, args
        assert "\\x1b" in r.output, args
