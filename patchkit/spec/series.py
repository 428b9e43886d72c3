"""The patch series: ``patches/series`` lists patch files in order with their sha256.

A patch file is patchkit's own form or a mail as ``git format-patch`` writes it
(spec.patchdoc reads both). patchkit's form starts with a header of ``Key: value`` lines,
a blank line, free text, then the diff (``git apply`` skips everything before the first
``diff --git``)::

    Subject: rpc: let zero-byte tensors pass deserialize_tensor's bounds check
    Why: tensor split over RPC sends zero-element views past a slice's end; the server aborts
    Upstream-Status: pending
    When: e95dae18d64ae4471d61a9dc87880a64e0e5c86e..
    Default: yes
    Experimental: no

    diff --git a/ggml/src/ggml-rpc/ggml-rpc.cpp b/ggml/src/ggml-rpc/ggml-rpc.cpp
    ...

``When`` is a range of upstream commits ``FROM..TO`` (either end may be empty =
open): the patch is meant for commits that descend from FROM and are ancestors of TO.
The series line is ``FILE sha256=HEX``; the hash covers the whole file and is checked
before the patch is used.

A mail keeps its author, date and title; its patchkit fields are optional trailers
(``Upstream-Status``, ``Patchkit-When``, ...) and the ones it leaves out are derived (Why
from the message, ``pending``, ``..``, Default yes): ``Patch.derived`` names them. Both
forms are checked the same way (fields, paths, symlinks, hashes).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from patchkit.core.errors import PatchError
from patchkit.core.fs import contained, read_capped, sha256_bytes
from patchkit.core.text import did_you_mean
from patchkit.spec.patchdoc import derive_fields, read_doc
from patchkit.spec.patchfile import parse_diff, refusals

__all__ = [
    "INDEPENDENT_LINE",
    "PATCH_MAX",
    "SERIES_MAX",
    "UPSTREAM_STATUSES",
    "Patch",
    "Series",
    "SeriesLine",
    "load_series",
    "parse_patch",
    "patch_name_from_file",
    "read_series_text",
    "rehash_series",
    "rewrite_series",
    "series_files",
    "series_line",
]

# a series whose patches were each made against the clean base and are applied alone (a
# CMake PATCH_COMMAND folder, `git apply` in name order), not stacked, says so by this line
INDEPENDENT_LINE = "# patchkit: independent"
UPSTREAM_STATUSES = ("pending", "submitted", "accepted", "backport", "inappropriate", "denied")
_REQUIRED = ("Subject", "Why", "Upstream-Status", "When")
_HEX = re.compile(r"^[0-9a-f]{7,40}$")
_SHA_OPTION = re.compile(r"sha256=[0-9a-fA-F]{64}")
SERIES_MAX = 1 << 20  # patches/series: a line per patch
PATCH_MAX = 64 << 20  # one patch file (llama.cpp's are a few KiB)
_DATA_HINT = (
    "patches are data: a patch may only change files inside the worktree "
    "(no absolute or '..' paths, no symlink leading out of it)"
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Patch:
    name: str
    path: Path
    sha256: str  # as recorded in the series
    subject: str
    why: str
    upstream_status: str
    when_from: str | None
    when_to: str | None
    default: bool
    experimental: bool
    files: tuple[str, ...]  # repository paths the diff touches
    kind: str = "patchkit"  # "patchkit" (header block), "mail" (git format-patch), "plain" (a diff)
    author: str | None = None  # "Name <mail>" of a mail (or of one after patchkit's header)
    date: str | None = None  # the mail's Date, as written
    derived: tuple[str, ...] = ()  # the fields a mail left out, derived (Why, When, ...)

    @property
    def filename(self) -> str:
        return self.path.name

    @property
    def when(self) -> str:
        return f"{self.when_from or ''}..{self.when_to or ''}"

    def read_verified(self) -> bytes:
        """The patch bytes, after checking them against the series' sha256."""
        data = _read_patch(self.path)
        actual = sha256_bytes(data)
        if actual != self.sha256:
            raise PatchError(
                f"{self.path}: sha256 is {actual[:12]}…, the series records {self.sha256[:12]}…",
                hint="if you edited the patch on purpose, run `patchkit series --rehash`",
            )
        return data


@dataclasses.dataclass(frozen=True, kw_only=True)
class Series:
    directory: Path
    patches: tuple[Patch, ...]
    # each patch applies to the base alone (INDEPENDENT_LINE): no patch builds on another
    independent: bool = False

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.patches)

    def get(self, name: str) -> Patch:
        for p in self.patches:
            if name in (p.name, p.filename):
                return p
        raise KeyError(name)

    def suggest(self, name: str) -> str:
        return did_you_mean(name, self.names)

    def select(self, names: tuple[str, ...]) -> tuple[Patch, ...]:
        """The named patches, in series order (the order names are given does not matter)."""
        wanted = set(names)
        return tuple(p for p in self.patches if p.name in wanted)


def patch_name_from_file(filename: str) -> str:
    stem = filename.removesuffix(".patch").removesuffix(".diff")
    return re.sub(r"^\d+-", "", stem)


def _yes_no(value: str, where: str, key: str) -> bool:
    v = value.strip().lower()
    if v in ("yes", "true", "on", "1"):
        return True
    if v in ("no", "false", "off", "0"):
        return False
    raise PatchError(f"{where}: {key} must be yes or no, not {value!r}")


def _parse_when(value: str, where: str) -> tuple[str | None, str | None]:
    lo, sep, hi = value.partition("..")
    if not sep:
        raise PatchError(f"{where}: When must be FROM..TO (either may be empty), not {value!r}")
    ends: list[str | None] = []
    for end in (lo.strip(), hi.strip()):
        if end and not _HEX.match(end):
            raise PatchError(f"{where}: When end {end!r} is not a commit sha (7-40 hex digits)")
        ends.append(end or None)
    return ends[0], ends[1]


def _read_patch(path: Path) -> bytes:
    where = f"{path.parent.name}/{path.name}"
    if not path.is_file():
        raise PatchError(
            f"{where}: listed in the series but the file does not exist"
            + ("" if not path.exists() else " as a regular file")
        )
    # a patch file is read from patches/ only: a link to a host file is never read
    contained(path, path.parent, error=PatchError, what=where)
    return read_capped(path, limit=PATCH_MAX, error=PatchError, what=where)


def parse_patch(data: bytes, path: Path, sha: str, *, where: str | None = None) -> Patch:
    """A patch from the bytes of its file (``path``: where it is or will be), checked as
    the series loader checks it: the fields, the diff's paths and symlinks."""
    where = where or f"{path.parent.name}/{path.name}"
    doc = read_doc(data, where)
    text = data.decode("utf-8", errors="replace")
    fields = derive_fields(doc, patch_name_from_file(path.name))
    if doc.native is not None:
        missing = [k for k in _REQUIRED if k not in doc.native]
        if missing:
            raise PatchError(f"{where}: header lacks {', '.join(missing)}")
    status = fields.upstream_status.split()[0].lower() if fields.upstream_status.split() else ""
    if status not in UPSTREAM_STATUSES:
        raise PatchError(
            f"{where}: Upstream-Status {status!r} is not one of {', '.join(UPSTREAM_STATUSES)}"
            + did_you_mean(status, UPSTREAM_STATUSES)
        )
    parsed = parse_diff(text)
    refused = refusals(parsed)
    if refused:
        more = f" (and {len(refused) - 1} more)" if len(refused) > 1 else ""
        raise PatchError(f"{where}: refused: {refused[0]}{more}", hint=_DATA_HINT)
    files = parsed.targets
    if not files:
        raise PatchError(f"{where}: holds no `diff --git` section")
    when_from, when_to = _parse_when(fields.when, where)
    return Patch(
        name=fields.name or patch_name_from_file(path.name),
        path=path,
        sha256=sha.lower(),
        subject=fields.subject,
        why=fields.why,
        upstream_status=fields.upstream_status,
        when_from=when_from,
        when_to=when_to,
        default=_yes_no(fields.default, where, "Default"),
        experimental=_yes_no(fields.experimental, where, "Experimental"),
        files=files,
        kind=doc.kind,
        author=str(doc.mail.author) if doc.mail is not None else None,
        date=doc.mail.date if doc.mail is not None else None,
        derived=fields.derived,
    )


def _load_patch(path: Path, sha: str) -> Patch:
    return parse_patch(_read_patch(path), path, sha)


@dataclasses.dataclass(frozen=True)
class SeriesLine:
    """One line of a series file (patchkit's or quilt's), as written: ``FILE [OPTION...]
    [# comment]``. Blank and comment-only lines are lines too (``file`` is ''); a line is
    written back byte for byte unless something in it changes (:meth:`with_sha256`)."""

    raw: str  # without its newline

    @classmethod
    def make(cls, file: str, sha256: str, comment: str | None = None) -> SeriesLine:
        """patchkit's line for a patch file: ``FILE sha256=HEX`` (and ``  #comment``)."""
        return cls(f"{file} sha256={sha256}" + ("" if comment is None else f"  #{comment}"))

    @property
    def _body(self) -> str:
        return self.raw.partition("#")[0]

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(self._body.split())

    @property
    def file(self) -> str:
        """The patch file it names ('' for a blank or comment-only line)."""
        return self.fields[0] if self.fields else ""

    @property
    def options(self) -> tuple[str, ...]:
        """What follows the file name (``sha256=HEX``, quilt's ``-p1``), as written."""
        return self.fields[1:]

    @property
    def sha256(self) -> str | None:
        """The recorded hash, when the line is exactly patchkit's ``FILE sha256=HEX``."""
        opts = self.options
        if len(opts) == 1 and _SHA_OPTION.fullmatch(opts[0]):
            return opts[0].removeprefix("sha256=")
        return None

    @property
    def comment(self) -> str | None:
        """The text after ``#`` (None: the line has no ``#``)."""
        _, sep, after = self.raw.partition("#")
        return after if sep else None

    def with_sha256(self, sha256: str) -> SeriesLine:
        """The same line recording ``sha256`` (every other byte kept)."""
        body, sep, comment = self.raw.partition("#")
        if _SHA_OPTION.search(body):
            body = _SHA_OPTION.sub(f"sha256={sha256}", body, count=1)
        else:
            head, name, rest = body.partition(self.file)
            body = f"{head}{name} sha256={sha256}{rest}"
        return SeriesLine(body + sep + comment)


def read_series_text(text: str) -> list[SeriesLine]:
    """Every line of a series file's text, in order."""
    return [SeriesLine(raw) for raw in text.splitlines()]


def rewrite_series(
    text: str, new_hashes: dict[str, str], dropped: set[str] | frozenset[str] = frozenset()
) -> str:
    """The series text with the files in ``dropped`` left out and the hashes of those in
    ``new_hashes`` replaced; every other line (comments, blank lines) byte for byte."""
    out: list[str] = []
    for raw in text.splitlines(keepends=True):
        body = raw.rstrip("\r\n")
        line = SeriesLine(body)
        if line.file and line.file in dropped:
            continue
        if line.file in new_hashes:
            raw = line.with_sha256(new_hashes[line.file]).raw + raw[len(body) :]
        out.append(raw)
    return "".join(out)


def series_line(filename: str, data: bytes) -> str:
    """The series line of a patch file: ``FILE sha256=HEX``."""
    return SeriesLine.make(filename, sha256_bytes(data)).raw


def _series_lines(series_file: Path) -> list[SeriesLine]:
    if not series_file.is_file():
        if series_file.exists():
            raise PatchError(f"{series_file} is not a regular file: it lists the patches in order")
        raise PatchError(f"{series_file} is missing: it lists the patches in order")
    data = read_capped(series_file, limit=SERIES_MAX, error=PatchError, what=str(series_file))
    try:
        return read_series_text(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise PatchError(
            f"{series_file}:{line}: not UTF-8 text (byte 0x{data[e.start]:02x})",
            hint="the series is text: `FILE sha256=HEX` lines",
        ) from None


def _series_file_name(fname: str, n: int) -> str:
    if "/" in fname or "\\" in fname or fname.startswith(".") or ":" in fname or "\0" in fname:
        raise PatchError(
            f"patches/series:{n}: {fname!r} must be a file in patches/", hint="name the file only, no folder"
        )
    return fname


def series_files(patches_dir: Path) -> list[str]:
    """The file names ``patches/series`` lists, in order ([] when there is no series)."""
    series_file = patches_dir / "series"
    if not series_file.exists() and not series_file.is_symlink():
        return []
    names: list[str] = []
    for n, line in enumerate(_series_lines(series_file), 1):
        if line.file:
            names.append(_series_file_name(line.file, n))
    return names


def load_series(patches_dir: Path) -> Series:
    series_file = patches_dir / "series"
    patches: list[Patch] = []
    independent = False
    for n, line in enumerate(_series_lines(series_file), 1):
        if not line.file:
            independent = independent or line.raw.strip() == INDEPENDENT_LINE
            continue
        if line.sha256 is None:
            raise PatchError(
                f"patches/series:{n}: expected `FILE sha256=<64 hex>`, got {line.raw.strip()[:120]!r}",
                hint="run `patchkit series --rehash` to write the hashes",
            )
        fname = _series_file_name(line.file, n)
        patch = _load_patch(patches_dir / fname, line.sha256)
        if any(p.name == patch.name for p in patches):
            raise PatchError(f"patches/series:{n}: patch name {patch.name!r} appears twice")
        patches.append(patch)
    return Series(directory=patches_dir, patches=tuple(patches), independent=independent)


def rehash_series(patches_dir: Path) -> list[tuple[str, str, str]]:
    """Rewrite the sha256 of every series line; returns (file, old, new) for changes."""
    from patchkit.core.fs import atomic_write_text

    series_file = patches_dir / "series"
    out: list[str] = []
    changed: list[tuple[str, str, str]] = []
    for n, line in enumerate(_series_lines(series_file), 1):
        if not line.file:
            out.append(line.raw)
            continue
        fname = _series_file_name(line.file, n)
        path = patches_dir / fname
        if not path.is_file():
            raise PatchError(f"patches/series names {fname!r}, which does not exist")
        new = sha256_bytes(_read_patch(path))
        old = next((f.split("=", 1)[1] for f in line.options if f.startswith("sha256=")), "")
        if old != new:
            changed.append((fname, old, new))
        out.append(SeriesLine.make(fname, new, line.comment).raw)
    atomic_write_text(series_file, "\n".join(out) + "\n")
    return changed
