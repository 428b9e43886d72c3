"""Files: hashing, and writes that are never seen half done.

Every write goes to a temp file in the target's folder, is flushed to disk, and is then
renamed over the target with ``os.replace`` (atomic on POSIX and on Windows, same
volume): readers see the old file or the new one, never a mix. On any error (Ctrl-C
included) the temp file is removed and the target is untouched.

Only a regular file (or a new name) is replaced that way; what else a target is gets
decided first (:func:`_target`), and a device or FIFO is never replaced by a regular file:

- a character device (``/dev/null``, a terminal) or a FIFO: written in place, as a shell's
  ``>`` would; a FIFO that no process reads is refused at once instead of waiting;
- this process's own stdout or stderr: written to that stream where it is (a file opened
  with ``>>`` is appended to, not truncated);
- a block device, a socket, a folder: refused (``ConfigError``, one line), left as it is;
- a symlink: replaced, never written through (a link planted in patchkit's cache or output
  folder cannot redirect a write), unless the caller writes a file the user named
  (``follow_links=True``: ``ci-template -o``, ``bump --summary``). Then the link is
  followed: a link to a regular file is written through (that file is replaced, the link
  stays), to a device, a FIFO or ``/proc/self/fd/1`` (``-o /dev/stdout``) written in place
  as above; a dangling link is refused.

The writers that need their temp file (:func:`atomic_file`, :func:`atomic_write_many`)
refuse a device or FIFO.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import json
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Literal, NamedTuple

from patchkit.core.errors import ConfigError, FatalError, Problem

__all__ = [
    "NO_SPACE_ERRNOS",
    "BatchWriteError",
    "Foreign",
    "ForeignEntry",
    "NotRegularFile",
    "atomic_file",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_many",
    "atomic_write_text",
    "check_writable",
    "contained",
    "first_foreign",
    "folder_entries",
    "mount_point",
    "open_regular",
    "read_capped",
    "read_regular",
    "recover_batches",
    "safe_copy",
    "sha256_bytes",
    "sha256_file",
    "sha256_stream",
    "write_failure",
]

# the errors that mean "the file system (or a limit on it) has no room for this"
NO_SPACE_ERRNOS = frozenset(
    e for e in (errno.ENOSPC, getattr(errno, "EDQUOT", None), errno.EFBIG) if e is not None
)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_stream(f: IO[bytes]) -> str:
    h = hashlib.sha256()
    for chunk in iter(lambda: f.read(1 << 20), b""):
        h.update(chunk)
    return h.hexdigest()


def sha256_file(path: Path) -> str:
    with path.open("rb") as f:
        return sha256_stream(f)


def _temp_beside(path: Path) -> tuple[int, Path]:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    return fd, Path(tmp)


class _Target(NamedTuple):
    """Where a write to a path goes: ``file`` (replaced atomically: the path itself or
    the regular file a link names), ``fd`` (this process's stdout/stderr), ``stream`` (a
    character device or FIFO, opened and written in place)."""

    kind: str
    path: Path
    fd: int = -1


_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISFIFO, "a FIFO"),
)


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _refused(path: Path, what: str) -> ConfigError:
    return ConfigError(
        f"{path} is {what}: refusing to write to it",
        hint="name a regular file (a new one, or one to replace), or /dev/stdout to print it",
    )


def _target(path: Path, *, follow_links: bool = False) -> _Target:
    """What writing ``path`` means (see the module docstring); ConfigError if nothing sane."""
    try:
        lst = os.lstat(path)
    except OSError:  # missing (a new file), or unreachable: the write itself says why
        return _Target("file", path)
    if stat.S_ISREG(lst.st_mode) or (stat.S_ISLNK(lst.st_mode) and not follow_links):
        return _Target("file", path)
    st = lst
    if stat.S_ISLNK(lst.st_mode):
        try:
            st = os.stat(path)  # follows the link (and the kernel's protected_symlinks rule)
        except FileNotFoundError:
            raise ConfigError(
                f"{path} is a symlink to {os.readlink(path)}, which does not exist: "
                "refusing to write through it",
                hint="remove the link, or name the file itself",
            ) from None
        except OSError as e:
            raise ConfigError(f"cannot write {path}: {e.strerror or e}") from None
    for fd in (1, 2):
        try:
            own = os.fstat(fd)
        except OSError:
            continue
        if (own.st_dev, own.st_ino) == (st.st_dev, st.st_ino):
            return _Target("fd", path, fd)
    if stat.S_ISREG(st.st_mode):  # a link to a regular file: replace that file
        return _Target("file", Path(os.path.realpath(path)))
    if stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode):
        return _Target("stream", path)
    raise _refused(path, _kind(st.st_mode))


def _replaceable(path: Path) -> Path:
    """``path`` when it can be replaced by a regular file; ConfigError for a device, FIFO,
    socket or folder (a link is replaced: see the module docstring)."""
    t = _target(path)
    if t.kind != "file":
        raise ConfigError(
            f"{path} is {_kind(os.stat(path).st_mode)}: refusing to replace it",
            hint="name a regular file (or a new one)",
        )
    return t.path


def check_writable(path: Path, *, follow_links: bool = False) -> None:
    """ConfigError now when a later :func:`atomic_write_bytes` of ``path`` could not write it:
    a folder, socket or block device there (or a dangling link, ``follow_links``), or no
    folder to hold it (the nearest existing parent is a file, or not writable). For a command
    that changes other files first: check every output before the first write."""
    t = _target(path, follow_links=follow_links)
    if t.kind != "file":
        return  # a terminal, FIFO or our own stdout: written in place
    parent = t.path.parent
    while not os.path.lexists(parent) and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise ConfigError(
            f"cannot write {path}: {parent} is not a folder",
            hint="name a file in an existing folder",
        )
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"cannot write {path}: the folder {parent} is not writable")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _write_stream(t: _Target, data: bytes) -> None:
    """Write ``data`` into a character device or FIFO (or our stdout/stderr) in place."""
    if t.kind == "fd":
        for stream in (sys.stdout, sys.stderr):  # what Python buffered goes first
            with contextlib.suppress(Exception):
                stream.flush()
        _write_all(t.fd, data)
        return
    flags = os.O_WRONLY | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        # O_NONBLOCK: opening a FIFO for writing would otherwise wait for a reader forever
        fd = os.open(t.path, flags | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        if e.errno == errno.ENXIO:
            raise ConfigError(
                f"{t.path} is a FIFO that no process reads: refusing to wait for one",
                hint="start its reader first, or name a regular file",
            ) from None
        raise ConfigError(f"cannot write {t.path}: {e.strerror or e}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not (stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)):  # swapped since it was looked at
            raise _refused(t.path, _kind(mode) if not stat.S_ISREG(mode) else "no longer what it was")
        os.set_blocking(fd, True)
        try:
            _write_all(fd, data)
        except BrokenPipeError:
            raise ConfigError(f"{t.path}: its reader closed it before everything was written") from None
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_file(path: Path, *, mode: int | None = None) -> Iterator[tuple[IO[bytes], Path]]:
    """``with atomic_file(p) as (f, tmp):`` write ``f`` (a binary file open for read and
    write); when the block ends without an error, ``tmp`` is synced and renamed to ``p``.

    ``mode``: the new file's permissions (default: the old file's, else 0o644 minus umask).
    Code in the block may check ``tmp`` (after ``f.flush()``) and raise to keep the old file.
    A link at ``p`` is replaced; a device, FIFO, socket or folder: ConfigError, nothing
    written.
    """
    path = _replaceable(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if mode is None and path.exists():
        mode = stat.S_IMODE(path.stat().st_mode)
    fd, tmp = _temp_beside(path)
    try:
        with os.fdopen(fd, "w+b") as f:
            yield f, tmp
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_bytes(
    path: Path, data: bytes, *, mode: int | None = None, follow_links: bool = False
) -> None:
    """``data`` into ``path``: replaced atomically, or written in place into a character
    device, a FIFO or this process's stdout/stderr. ``follow_links``: ``path`` is a name
    the user gave (``-o FILE``): a link there is followed (see the module docstring)."""
    t = _target(path, follow_links=follow_links)
    if t.kind != "file":
        _write_stream(t, data)
        return
    with atomic_file(t.path, mode=mode) as (f, _):
        f.write(data)


def atomic_write_text(path: Path, text: str, *, mode: int | None = None, follow_links: bool = False) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), mode=mode, follow_links=follow_links)


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


class BatchWriteError(OSError):
    """An :func:`atomic_write_many` that failed: ``target`` is the file it was writing (or
    renaming into place) when it failed; every target is as it was before the call.
    ``errno``/``strerror`` are the underlying error's."""

    def __init__(self, target: Path, cause: OSError) -> None:
        super().__init__(cause.errno, cause.strerror or str(cause))
        self.target = target


def atomic_write_many(
    files: Mapping[Path, bytes], *, check: Callable[[Path, Path], None] | None = None
) -> None:
    """Every file or none: each file's bytes go to a temp file beside it (synced, the old
    file's permissions kept), then they are renamed into place one by one; if a rename fails
    (or the process is interrupted), the files already renamed get their old contents back
    (a file that did not exist is removed again). A device, FIFO, socket or folder among the
    targets is refused before anything is written.

    A process killed while renaming (kill -9, a crash, power loss) cannot put them back
    itself: a journal (``.patchkit-batch.*.json`` in each folder written, listing every
    target, its temp file and its backup) is on disk for as long as the renames run, and
    :func:`recover_batches` on any of those folders (the next batch there does it first; the
    CLI does it for the project's folders) puts the old files back.

    ``check(target, tmp)`` runs on each staged temp file before any rename (e.g. to read
    the written bytes back); it raises to write nothing. An OSError while staging or
    renaming is raised as :class:`BatchWriteError` naming the file; no temp file or backup
    is left behind.
    """
    targets = {_replaceable(path): data for path, data in files.items()}
    for folder in dict.fromkeys(t.parent for t in targets):
        if folder.is_dir():
            recover_batches(folder)
    staged: list[tuple[Path, Path]] = []
    current = next(iter(targets), Path())
    try:
        try:
            for current, data in targets.items():
                fd, tmp = _temp_beside(current)
                staged.append((current, tmp))
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())  # what is checked is exactly what gets renamed
                if current.exists():
                    os.chmod(tmp, stat.S_IMODE(current.stat().st_mode))
                if check is not None:
                    check(current, tmp)
            _rename_all(staged)
        finally:
            for _, tmp in staged:
                tmp.unlink(missing_ok=True)
    except BatchWriteError:
        raise
    except OSError as e:
        raise BatchWriteError(current, e) from e


_JOURNAL_PREFIX = ".patchkit-batch."
_JOURNAL_SUFFIX = ".json"
_JOURNAL_MAX = 1 << 20


def _lock_fd(fd: int, *, wait: bool) -> bool:
    """An exclusive lock on an open journal (released by the OS when its process dies)."""
    if sys.platform == "win32":  # pragma: no cover - Windows
        import msvcrt

        try:
            msvcrt.locking(fd, msvcrt.LK_LOCK if wait else msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except OSError:
        return False
    return True


class _Journal:
    """The journal of one batch of renames, one copy in each folder it writes (see
    :func:`atomic_write_many`); each copy stays locked while the batch runs."""

    def __init__(self, entries: Sequence[tuple[Path, Path, Path | None]]) -> None:
        data = json.dumps(
            {"entries": [[str(t), str(tmp), str(b) if b else None] for t, tmp, b in entries]}
        ).encode()
        self.copies: list[tuple[Path, int]] = []
        try:
            for folder in dict.fromkeys(t.parent for t, _, _ in entries):
                fd, name = tempfile.mkstemp(prefix=_JOURNAL_PREFIX, suffix=".new", dir=folder)
                self.copies.append((Path(name), fd))
                _lock_fd(fd, wait=True)
                _write_all(fd, data)
                os.fsync(fd)
                final = Path(name[: -len(".new")] + _JOURNAL_SUFFIX)
                os.rename(name, final)  # a new name; the lock goes with the file
                self.copies[-1] = (final, fd)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """The batch is over (done or put back): the journal goes, then its locks."""
        for path, _ in self.copies:
            with contextlib.suppress(OSError):
                path.unlink()
        for _, fd in self.copies:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.copies = []


def recover_batches(folder: Path) -> list[Path]:
    """Put back the files of an :func:`atomic_write_many` whose process died while renaming
    (a journal in ``folder`` that no live process holds): each target renamed already gets
    its old file back (a new one is removed), each temp file and backup goes. Returns the
    targets put back (empty: nothing was interrupted). A journal that is not one (too large,
    not JSON, not a plain file) is left alone."""
    restored: list[Path] = []
    try:
        names = sorted(n for n in os.listdir(folder) if n.startswith(_JOURNAL_PREFIX))
    except OSError:
        return restored
    for name in names:
        path = folder / name
        try:
            fd = os.open(path, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        except OSError:
            continue
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode) or not _lock_fd(fd, wait=False):
                continue  # not a journal, or its batch is running now
            if name.endswith(".new"):  # died while writing it: nothing was renamed yet
                path.unlink(missing_ok=True)
                continue
            with os.fdopen(os.dup(fd), "rb") as f:
                raw = f.read(_JOURNAL_MAX + 1)
            try:
                entries = [
                    (Path(t), Path(tmp), Path(b) if b else None) for t, tmp, b in json.loads(raw)["entries"]
                ]
            except (ValueError, KeyError, TypeError):
                continue
            for target, tmp, backup in entries:
                if os.path.lexists(tmp):  # not renamed yet
                    tmp.unlink()
                elif backup is not None and os.path.lexists(backup):
                    os.replace(backup, target)
                    restored.append(target)
                elif backup is None:
                    target.unlink(missing_ok=True)
                    restored.append(target)
            for _, _, backup in entries:
                if backup is not None:
                    backup.unlink(missing_ok=True)
            for other in {t.parent for t, _, _ in entries}:  # the journal's other copies
                for n in os.listdir(other):
                    if n.startswith(_JOURNAL_PREFIX) and n != name and _same_journal(other / n, raw):
                        (other / n).unlink(missing_ok=True)
            path.unlink()
        finally:
            os.close(fd)
    return restored


def _same_journal(path: Path, raw: bytes) -> bool:
    try:
        return path.read_bytes() == raw
    except OSError:
        return False


def _rename_all(staged: Sequence[tuple[Path, Path]]) -> None:
    """Rename each staged temp over its target; on any error put the renamed ones back."""
    done: list[tuple[Path, Path | None]] = []
    backups: list[Path | None] = []
    target = staged[0][0] if staged else Path()
    journal: _Journal | None = None
    try:
        try:
            for target, _ in staged:
                backups.append(_backup(target))
            journal = _Journal([(t, tmp, b) for (t, tmp), b in zip(staged, backups, strict=True)])
            for (target, tmp), backup in zip(staged, backups, strict=True):
                os.replace(tmp, target)
                done.append((target, backup))
        except BaseException:
            for renamed, backup in reversed(done):  # put the old files back
                if backup is None:
                    renamed.unlink(missing_ok=True)
                else:
                    os.replace(backup, renamed)
            raise
        finally:
            if journal is not None:
                journal.close()
            for backup in backups:
                if backup is not None:
                    backup.unlink(missing_ok=True)
    except OSError as e:
        raise BatchWriteError(target, e) from e


def _backup(target: Path) -> Path | None:
    """A second name for ``target`` (a hard link; a copy where links are not supported) to
    put it back with; None when there is no file there."""
    if not os.path.lexists(target):
        return None
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".orig", dir=target.parent)
    os.close(fd)
    backup = Path(name)
    try:
        backup.unlink()
        os.link(target, backup, follow_symlinks=False)
    except OSError:
        shutil.copy2(target, backup, follow_symlinks=False)
    return backup


class Foreign(NamedTuple):
    """An entry of a folder that its owner did not write there: ``name`` (relative to the
    folder: ``raw``, ``bin/x``), whether it is a ``link``, and ``why`` (the owner's reason,
    "" when the name is not one it writes or the entry is not the plain file or folder it
    writes)."""

    name: str
    link: bool = False
    why: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ForeignEntry(Problem):
    """A folder patchkit would replace or write into holds what its owner did not write."""

    folder: Path  # the folder, as the user named it
    entry: Foreign  # the first entry its owner did not write
    owner: str  # whose folder it would be: "build" (an output folder), "bench" (a results folder)


def folder_entries(folder: Path) -> list[str] | None:
    """The sorted names in ``folder``; None when nothing is there. OSError (``ENOTDIR``)
    when it is a link or not a folder, or the error listing it failed with."""
    if not os.path.lexists(folder):
        return None
    if folder.is_symlink() or not folder.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "not a folder", str(folder))
    return sorted(os.listdir(folder))


def first_foreign(
    folder: Path,
    entries: Iterable[str],
    *,
    files: Callable[[str], bool],
    dirs: Mapping[str, Callable[[Path], Foreign | None] | None],
) -> Foreign | None:
    """The first entry of ``folder`` that its owner does not write, or None: the owner writes
    plain files whose names ``files`` accepts and plain folders named in ``dirs`` (each with
    an optional check of its contents, which returns the first foreign entry in it). A link
    is never the owner's: a planted link must not make a folder look like one it may replace.

    This is the one test of "is this folder patchkit's to replace or write into"; the proof
    of ownership that comes first (a marker file, a valid build-info.json) is the owner's.
    """
    for name in entries:
        p = folder / name
        link = p.is_symlink()
        if not link and files(name) and p.is_file():
            continue
        if not link and name in dirs and p.is_dir():
            inner = dirs[name]
            found = inner(p) if inner is not None else None
            if found is not None:
                return found
            continue
        return Foreign(name, link=link)
    return None


def contained(path: Path, root: Path, *, error: type[FatalError], what: str = "") -> Path:
    """``path`` with every link followed; ``error`` if that is not inside ``root``.

    What patchkit copies out of a worktree, a build dir or an output folder must come from
    there: a symlink a patch (or anyone) planted to a host file is refused, never read.
    """
    real = path.resolve()
    base = root.resolve()
    if not real.is_relative_to(base):
        where = f"{what}: " if what else ""
        raise error(
            f"{where}{path} resolves to {real}, outside {base}: refusing to copy it",
            hint="a symlink leaves the folder it belongs to; remove it (or rebuild with --clean)",
        )
    return real


def safe_copy(src: Path, dest: Path, *, root: Path, error: type[FatalError]) -> Path:
    """Copy ``src`` (which must resolve inside ``root`` to a regular file) to ``dest`` as a
    plain file (a symlink at ``dest`` is replaced, never written through)."""
    real = contained(src, root, error=error)
    try:
        st = real.stat()
    except OSError as e:
        raise error(f"{src}: cannot read it: {e.strerror or e}") from None
    if not stat.S_ISREG(st.st_mode):
        raise error(
            f"{src} is not a regular file: refusing to copy it",
            hint="only plain files are copied out of a build",
        )
    if dest.is_symlink():
        dest.unlink()
    shutil.copy2(real, dest, follow_symlinks=True)
    return dest


def read_capped(path: Path, *, limit: int, error: type[FatalError], what: str = "") -> bytes:
    """The bytes of a regular file no larger than ``limit``; ``error`` (one line) for a
    missing, special (FIFO, device: reading could block or never end), unreadable or too
    large file. Never reads more than ``limit + 1`` bytes."""
    label = what or str(path)
    try:
        # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
        with open(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise error(f"{label} is not a regular file")
            data = f.read(limit + 1)
    except FileNotFoundError:
        raise error(f"{label} does not exist") from None
    except IsADirectoryError:
        raise error(f"{label} is a folder, not a file") from None
    except OSError as e:
        raise error(f"cannot read {label}: {e.strerror or e}") from None
    if len(data) > limit:
        raise error(
            f"{label} is larger than {_human(limit)}: not a file patchkit wrote or reads",
            hint="is it the right file?",
        )
    return data


class NotRegularFile(OSError):
    """:func:`open_regular`'s refusal of a FIFO, device, socket or folder, or of a file over
    its cap (an OSError: a caller that takes an unreadable file for a missing one still does)."""


def open_regular(path: Path) -> IO[bytes]:
    """``path`` opened for reading when it is itself a regular file: for what a process
    patchkit does not trust could have planted (the build dir and worktree after a
    sandboxed configure or build, read back outside the sandbox). A symbolic link is not
    followed (``O_NOFOLLOW``, ``ELOOP``: a link swapped in never reads a host file), a FIFO
    does not block (``O_NONBLOCK``), and what was opened must be a regular file (``fstat``).
    Every refusal is an OSError. Only the last component is not followed: the folders
    above are the caller's to check (:func:`contained`)."""
    flags = os.O_RDONLY | getattr(os, "O_BINARY", 0)
    flags |= getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    f = open(os.open(path, flags), "rb")  # noqa: SIM115 (the caller closes it)
    try:
        mode = os.fstat(f.fileno()).st_mode
    except OSError:
        f.close()
        raise
    if not stat.S_ISREG(mode):
        f.close()
        raise NotRegularFile(errno.EINVAL, f"not a regular file ({_kind(mode)})", str(path))
    return f


def read_regular(path: Path, *, limit: int, part: Literal["all", "head", "tail"] = "all") -> bytes:
    """The bytes of a regular file (:func:`open_regular`: no link followed, no FIFO
    waited on), at most ``limit`` of them: a larger file is refused (an OSError), or with
    ``part`` ``"head"`` / ``"tail"`` its first / last ``limit`` bytes are returned."""
    with open_regular(path) as f:
        size = os.fstat(f.fileno()).st_size
        if part == "all" and size > limit:
            raise NotRegularFile(errno.EFBIG, f"larger than {_human(limit)}", str(path))
        if part == "tail" and size > limit:
            f.seek(size - limit)
        data = f.read(limit + 1)
    if len(data) > limit:  # it grew while read
        if part == "all":
            raise NotRegularFile(errno.EFBIG, f"larger than {_human(limit)}", str(path))
        data = data[:limit] if part == "head" else data[-limit:]
    return data


def _human(n: int) -> str:
    for unit, mult in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= mult:
            return f"{n / mult:.3g} {unit}"
    return f"{n} bytes"


def mount_point(path: Path) -> Path:
    """The mount point of the file system holding ``path`` (or its nearest existing parent)."""
    p = path.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    p = p.resolve()
    while not os.path.ismount(p) and p != p.parent:
        p = p.parent
    return p


def write_failure(
    e: OSError,
    *,
    dest: Path,
    folder: Path,
    error: type[FatalError],
    full_error: type[FatalError] | None = None,
) -> FatalError:
    """A one-line error for a failed write of ``dest`` into ``folder`` (the folder the user
    named, e.g. --out): a full disk names that folder's file system, its mount point and
    free space, and the file being written; a refusal (permissions, read-only) says so."""
    reason = e.strerror or str(e)
    if e.errno in NO_SPACE_ERRNOS:
        mount = mount_point(folder)
        try:
            free = f"{_human(shutil.disk_usage(mount).free)} free"
        except OSError:
            free = "free space unknown"
        if e.errno == errno.EFBIG:
            msg = (
                f"{dest} is too large for {folder}: its file system (mounted at {mount}, "
                f"{free}) or a file size limit (ulimit -f) refuses it"
            )
        else:
            msg = (
                f"no space left on the file system of {folder} (mounted at {mount}, "
                f"{free}) while writing {dest}"
            )
        return (full_error or error)(
            msg, hint=f"free space on {mount}, or pass another --out on another disk"
        )
    return error(
        f"cannot write {dest}: {reason}",
        hint=f"is {folder} writable? Pass another --out, or fix its permissions",
    )
