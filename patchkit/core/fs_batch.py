"""Every file or none: :func:`atomic_write_many`, the all-or-nothing multi-file writer, and
:func:`recover_batches`, which puts a batch back that its process could not (killed while
renaming): each folder a batch writes holds a locked journal for as long as its renames
run. Refresh's "every pin moves or none", ``series import``, PE edits."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from patchkit.core.fs_target import replaceable, temp_beside, write_all

__all__ = ["BatchWriteError", "atomic_write_many", "recover_batches"]


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
    targets = {replaceable(path): data for path, data in files.items()}
    for folder in dict.fromkeys(t.parent for t in targets):
        if folder.is_dir():
            recover_batches(folder)
    staged: list[tuple[Path, Path]] = []
    current = next(iter(targets), Path())
    try:
        try:
            for current, data in targets.items():
                fd, tmp = temp_beside(current)
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
                write_all(fd, data)
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
