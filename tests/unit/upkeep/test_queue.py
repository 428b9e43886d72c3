"""upkeep.queue without git: where import finds the patches (mboxes, quilt series files,
folders), the names it gives them, its caps, and --author."""

from __future__ import annotations

from pathlib import Path

import pytest

from patchkit.core.errors import ConfigError, PatchError
from patchkit.spec.patchdoc import Ident
from patchkit.upkeep import queue
from patchkit.upkeep.export import parse_ident
from patchkit.upkeep.queue import sources_from_paths
from tests.fixtures.queue import QUEUE_DATA

MAILS = sorted(QUEUE_DATA.glob("*.patch"))


def test_an_mbox_gives_each_mail_a_name_from_its_title(tmp_path: Path) -> None:
    mbox = tmp_path / "queue.mbox"
    mbox.write_bytes(b"".join(m.read_bytes() for m in MAILS[:3]))
    single = tmp_path / "one.eml"
    single.write_bytes(MAILS[3].read_bytes())
    sources = sources_from_paths([mbox, single])
    # the names git format-patch gave them (52 characters at most after the number)
    assert [s.filename for s in sources] == [m.name for m in MAILS[:4]]
    assert [s.label for s in sources] == [
        f"{mbox} (mail 1)",
        f"{mbox} (mail 2)",
        f"{mbox} (mail 3)",
        str(single),
    ]
    assert [s.data for s in sources] == [m.read_bytes() for m in MAILS[:4]]


def test_a_folder_is_read_by_its_series_file_else_by_sorted_names(tmp_path: Path) -> None:
    for m in MAILS:
        (tmp_path / m.name).write_bytes(m.read_bytes())
    (tmp_path / "README").write_text("not a patch")
    assert [s.filename for s in sources_from_paths([tmp_path])] == [m.name for m in MAILS]
    (tmp_path / "series").write_text(f"# quilt\n{MAILS[4].name}\n\n{MAILS[0].name} -p1\n")
    assert [s.filename for s in sources_from_paths([tmp_path])] == [MAILS[4].name, MAILS[0].name]
    for bad, message in (
        ("../x.patch", "is not a file below the series file's folder"),
        ("/etc/passwd", "is not a file below the series file's folder"),
        (f"{MAILS[0].name} -p0", "option '-p0'"),
    ):
        (tmp_path / "series").write_text(bad + "\n")
        with pytest.raises(PatchError, match=message):
            sources_from_paths([tmp_path])
    (tmp_path / "series").unlink()
    (tmp_path / "link.patch").symlink_to(tmp_path.parent)
    (tmp_path / "quilt").mkdir()
    (tmp_path / "quilt" / "series").write_text("../link.patch\n")
    with pytest.raises(PatchError, match="is not a file below"):
        sources_from_paths([], series_file=tmp_path / "quilt" / "series")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(PatchError, match="holds no patch files"):
        sources_from_paths([empty])


def test_the_caps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mbox = tmp_path / "big.mbox"
    mbox.write_bytes(b"".join(m.read_bytes() for m in MAILS))
    monkeypatch.setattr(queue, "IMPORT_MAX_PATCHES", 4)
    with pytest.raises(PatchError, match="more than 4 patches to import: not a patch queue"):
        sources_from_paths([mbox])
    monkeypatch.setattr(queue, "IMPORT_MAX_PATCHES", 5000)
    monkeypatch.setattr(queue, "IMPORT_MAX_BYTES", 1000)
    with pytest.raises(PatchError, match="hold more than 0 MiB: not a patch queue"):
        sources_from_paths([mbox])


def test_author_option() -> None:
    assert parse_ident("Ann Example <ann@example.invalid>") == Ident(
        name="Ann Example", email="ann@example.invalid"
    )
    assert parse_ident("nobody <>") == Ident(name="nobody", email="")
    for bad in ("ann@example.invalid", "<a@b>", "A <a@b> trailing"):
        with pytest.raises(ConfigError, match="must be `Name <mail>`"):
            parse_ident(bad)
