"""Output files that are never lost: checked before anything loads, written beside their target and
renamed into place on success, locked against a second writer.

A command writing ``FILE`` writes ``FILE.partial`` in the same folder (created if needed) and renames
it to ``FILE`` when it succeeds, so an interrupted or failed run leaves an existing ``FILE`` as it was
and the rows written so far in ``FILE.partial`` (``pluie-reward score --resume`` continues it). While
it writes, it holds a lock (``fcntl.flock``) on ``FILE.partial``: a second command writing the same
``FILE`` is refused instead of interleaving lines with the first. The lock goes with the process, so a
killed run leaves no stale lock.

Example:
    >>> import tempfile
    >>> target = Path(tempfile.mkdtemp()) / "out" / "scored.jsonl"
    >>> with OutputFile(target) as out:
    ...     _ = out.write('{"a": 1}\\n')
    ...     out.commit()
    >>> target.read_text(), partial_path(target).exists()
    ('{"a": 1}\\n', False)
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import IO, Any, Iterable

from ..shared import UsageError, complete_json_lines, lock_file

PARTIAL = ".partial"


def partial_path(path: Path) -> Path:
    """Where ``path`` is written until the run succeeds: ``path`` + ``.partial``, in the same folder.

    Example:
        >>> partial_path(Path("out/scored.jsonl"))
        PosixPath('out/scored.jsonl.partial')
    """
    return path.with_name(path.name + PARTIAL)


def _busy(path: Path, option: str) -> UsageError:
    return UsageError(f"{option} {path}: another command is writing it now (it holds the lock on {partial_path(path)}); "
                      "wait for it to finish, or choose another output file.")


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _is_open_file(path: Path, fd: int) -> bool:
    try:
        here, opened = os.stat(path), os.fstat(fd)
    except OSError:
        return False
    return (here.st_dev, here.st_ino) == (opened.st_dev, opened.st_ino)


def _writable_folder(folder: Path, option: str) -> None:
    for parent in [folder, *folder.parents]:
        if parent.exists():
            if not parent.is_dir():
                raise UsageError(f"{option}: {parent} is a file, so nothing can be written under it; choose another path.")
            if not os.access(parent, os.W_OK | os.X_OK):
                raise UsageError(f"{option}: {parent} is not writable; choose another path.")
            try:  # what access() cannot tell (root on /proc, a read-only mount...): make and remove a folder there
                os.rmdir(tempfile.mkdtemp(prefix=".pluie-check-", dir=parent))
            except OSError as err:
                raise UsageError(f"{option}: nothing can be written in {parent} ({err.strerror}); "
                                 "choose another path.") from None
            return


def check_output_file(path: Path | None, option: str = "--output", *, inputs: Iterable[Path | None] = (),
                      overwrite: bool | None = None, resume: bool | None = None) -> None:
    """Fail early, before anything loads, if ``path`` cannot be written as a file.

    Args:
        path: the output file (``None``: standard output, nothing to check).
        option: the option that named it, for the messages.
        inputs: files the command reads: the output may not be one of them (same file, also through
            a symbolic or hard link).
        overwrite: ``False``: an existing ``path`` is refused (say ``--overwrite``); ``None``: not checked.
        resume: ``True``: an existing ``path`` or ``path.partial`` is continued, not refused (``None``: the
            command cannot resume, its messages do not offer ``--resume``).

    Raises:
        UsageError: a folder, an unwritable place, an input, an existing file or the file of a run
            still writing (says what to do).

    Example:
        >>> check_output_file(None)
    """
    if path is None:
        return
    if path.is_dir():
        raise UsageError(f"{option} {path} is a folder; give a file name, e.g. {path / 'scored.jsonl'}.")
    for source in inputs:
        if source is not None and (_same_file(path, source) or _same_file(partial_path(path), source)):
            raise UsageError(f"{option} {path} is the input {source}: writing it would destroy the input; "
                             "choose another output file.")
    _writable_folder(path.parent, option)
    partial = partial_path(path)
    if partial.is_file():
        fd = os.open(partial, os.O_RDONLY)
        try:
            if not lock_file(fd):
                raise _busy(path, option)
        finally:
            os.close(fd)
        if overwrite is False and not resume:
            how = "pass --resume to continue it, or --overwrite to start again" if resume is not None else \
                "pass --overwrite to write the file again"
            raise UsageError(f"{option} {path}: an interrupted run left {partial}; {how}.")
    if overwrite is False and not resume and path.exists():
        how = " (or --resume to complete it)" if resume is not None else ""
        raise UsageError(f"{option} {path} exists; pass --overwrite to replace it{how}, or choose another output file.")


def check_output_dir(path: Path | None, option: str = "--output-dir") -> None:
    """Fail early (before the model loads) if ``path`` cannot be used as an output folder.

    Example:
        >>> check_output_dir(None)
    """
    if path is None:
        return
    if path.exists() and not path.is_dir():
        raise UsageError(f"{option} {path} is a file; give a folder (it is created if needed).")
    _writable_folder(path, option)


class OutputFile:
    """Write ``path`` through ``path.partial`` (locked), renamed to ``path`` by :meth:`commit`.

    Args:
        path: the output file; missing folders are created.
        option: the option that named it, for the messages.
        resume: keep what ``path.partial`` (or, without one, ``path``) holds and append to it (read it
            with :meth:`done_lines`); otherwise start empty.

    Leaving the ``with`` block without :meth:`commit` keeps ``path.partial`` (if anything was written)
    and leaves ``path`` untouched.
    """

    def __init__(self, path: Path, option: str = "--output", *, resume: bool = False) -> None:
        self.path, self.option, self.resume = Path(path), option, resume
        self.partial = partial_path(self.path)
        self.handle: IO[str] | None = None
        self.committed = False

    def __enter__(self) -> "OutputFile":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.resume and not self.partial.exists() and self.path.is_file():
            self.partial.write_bytes(self.path.read_bytes())  # complete the old output in a copy
        fd = os.open(self.partial, os.O_RDWR | os.O_CREAT, 0o666)
        if not lock_file(fd) or not _is_open_file(self.partial, fd):  # renamed by a writer that just finished
            os.close(fd)
            raise _busy(self.path, self.option)
        if not self.resume:
            os.ftruncate(fd, 0)
        self.handle = os.fdopen(fd, "r+", encoding="utf-8", newline="")
        self.handle.seek(0, os.SEEK_END)
        return self

    def done_lines(self) -> list[dict[str, Any]]:
        """The complete JSON lines already in the file (resuming); a last line cut short by an
        interruption is dropped from the file, to be written again, and a last complete record that
        lacks its newline gets it (the next record starts a line of its own)."""
        assert self.handle is not None
        self.handle.seek(0)
        data = self.handle.buffer.read()
        try:
            lines, good = complete_json_lines(data)
        except ValueError as error:
            raise UsageError(f"{self.partial} {error}; the file was edited or damaged: pass --overwrite to start again.") from None
        self.handle.truncate(good)
        self.handle.seek(good)
        if good and data[good - 1:good] != b"\n":  # interrupted between a record and its newline
            self.handle.write("\n")
        return lines

    def write(self, text: str) -> int:
        assert self.handle is not None
        return self.handle.write(text)

    def flush(self) -> None:
        """Make what was written reach the disk."""
        assert self.handle is not None
        self.handle.flush()
        os.fsync(self.handle.fileno())

    def commit(self) -> None:
        """Rename the complete file into place (still holding the lock)."""
        self.flush()
        os.replace(self.partial, self.path)
        self.committed = True

    def written(self) -> bool:
        """Whether the partial file holds anything."""
        if self.handle is None:
            return False
        self.handle.flush()
        return os.fstat(self.handle.fileno()).st_size > 0

    def __exit__(self, *exc: Any) -> None:
        if self.handle is None:
            return
        if not self.committed:
            if not self.written():
                self.partial.unlink(missing_ok=True)  # nothing to keep
        self.handle.close()
        self.handle = None


def write_text_file(path: Path, text: str, option: str = "--output") -> Path:
    """Write a whole text file through :class:`OutputFile`: renamed into place complete, never half
    written, and refused while another command writes it.

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "rows.json"
        >>> write_text_file(path, "[]\\n").read_text()
        '[]\\n'
    """
    with OutputFile(path, option) as out:
        out.write(text)
        out.commit()
    return path
