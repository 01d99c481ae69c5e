"""Output files that are never lost: checked before anything loads, written beside their target and
renamed into place on success, locked against a second writer; a FIFO or a character device is
written as a stream, never replaced.

A command writing ``FILE`` writes ``FILE.partial`` in the same folder (created if needed) and renames
it to ``FILE`` when it succeeds, so an interrupted or failed run leaves an existing ``FILE`` as it was
and the rows written so far in ``FILE.partial`` (``pluie-reward score --resume`` continues it). While
it writes, it holds a lock (``fcntl.flock``) on ``FILE.partial``: a second command writing the same
``FILE`` is refused instead of interleaving lines with the first. The lock goes with the process, so a
killed run leaves no stale lock.

A name too long for ``FILE.partial`` to fit the file system's name limit (``NAME_MAX``, 255 bytes on
most) gets a shorter partial name that is still unique to it (:func:`partial_path`). A symbolic link is
written through: the file it points to is replaced, the link kept. A FIFO or a character device
(``/dev/null``, a terminal, ``/dev/stdout`` on a pipe) is never renamed over: it is written as a stream,
without partial file, lock or ``--resume``; a link to a regular file that a process holds open
(``/dev/stdout`` redirected to a file) is refused (leave out the option to write standard output).
A write that fails (disk full...) is an :class:`OutputError` that names the file and says what was kept.

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

import errno
import hashlib
import os
import stat
import tempfile
from pathlib import Path
from typing import IO, Any, Iterable

from ..shared import UsageError, lock_file, resume_json_lines

PARTIAL = ".partial"


class OutputError(UsageError):
    """An output that could not be written (disk full, a closed or full standard output...)."""

    def __init__(self, message: str, stdout: bool = False) -> None:
        super().__init__(message)
        self.stdout = stdout  # standard output failed: nothing more may be flushed to it at exit


def _name_max(folder: Path) -> int:
    """The longest file name (bytes) the file system of ``folder`` (or of its nearest existing parent) allows."""
    for parent in [folder, *folder.parents]:
        if parent.is_dir():
            try:
                return int(os.pathconf(parent, "PC_NAME_MAX"))
            except (OSError, ValueError):
                break
    return 255


def partial_path(path: Path) -> Path:
    """Where ``path`` is written until the run succeeds: ``path`` + ``.partial``, in the same folder;
    when that name would be longer than the file system allows, the start of the name, a hash of the
    whole name and ``.partial`` (the same for every run writing ``path``, so ``--resume`` finds it).

    Example:
        >>> partial_path(Path("out/scored.jsonl"))
        PosixPath('out/scored.jsonl.partial')
        >>> long = partial_path(Path("x" * 255))
        >>> len(long.name), long.name[:3], long.name[-8:]
        (255, 'xxx', '.partial')
    """
    name = path.name + PARTIAL
    limit = _name_max(path.parent)
    if len(os.fsencode(name)) <= limit:
        return path.with_name(name)
    tail = f"~{hashlib.sha256(os.fsencode(path.name)).hexdigest()[:16]}{PARTIAL}"
    head = os.fsencode(path.name)[: max(0, limit - len(tail))].decode("utf-8", errors="ignore")
    return path.with_name(head + tail)


def _through_process(path: Path) -> bool:
    """Whether resolving the link ``path`` passes through ``/proc`` (``/dev/stdout``, ``/dev/fd/N``): a file
    some process holds open, which another file renamed over its name would not replace."""
    seen = 0
    current = Path(os.path.abspath(path))
    while current.is_symlink() and seen < 40:
        if str(current).startswith("/proc/"):
            return True
        current = Path(os.path.abspath(current.parent / os.readlink(current)))
        seen += 1
    return str(current).startswith("/proc/")


def resolve_output(path: Path, option: str = "--output") -> tuple[Path, bool]:
    """Where an output named ``path`` is written, and whether as a stream.

    Returns:
        ``(path, False)`` for a new or regular file; ``(target, False)`` for a symbolic link to a file (written
        through: ``target`` is replaced, the link kept); ``(path, True)`` for a FIFO or a character device
        (written in place, as a stream).

    Raises:
        UsageError: a symbolic link loop, a block device or socket, a link to a file a process holds open,
            a name longer than the file system allows.

    Example:
        >>> resolve_output(Path("/dev/null"))
        (PosixPath('/dev/null'), True)
        >>> resolve_output(Path("out/scored.jsonl"))
        (PosixPath('out/scored.jsonl'), False)
    """
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise UsageError(f"{option} {path} is a symbolic link loop (it leads back to itself); "
                             "fix or remove the link, or choose another output file.") from None
        if err.errno == errno.ENAMETOOLONG:
            raise UsageError(f"{option} {path}: the name is longer than the file system allows "
                             f"({_name_max(path.parent)} bytes); choose a shorter name.") from None
        mode = None  # missing (a new file, or a link to one), or a path the folder checks refuse
    if mode is not None and (stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)):
        return path, True
    if mode is not None and (stat.S_ISBLK(mode) or stat.S_ISSOCK(mode)):
        kind = "a block device" if stat.S_ISBLK(mode) else "a socket"
        raise UsageError(f"{option} {path} is {kind}, not a file; choose an output file.")
    if path.is_symlink():
        if _through_process(path):
            raise UsageError(f"{option} {path} leads to a file a process holds open ({os.path.realpath(path)}), "
                             f"which would not be replaced in place; to write standard output, leave out {option}; "
                             "else name the file itself.")
        return Path(os.path.realpath(path)), False
    if len(os.fsencode(path.name)) > _name_max(path.parent):
        raise UsageError(f"{option} {path}: the name is longer than the file system allows "
                         f"({_name_max(path.parent)} bytes); choose a shorter name.")
    return path, False


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
            still writing, a stream (FIFO, device) with ``resume`` (says what to do; see :func:`resolve_output`).

    Example:
        >>> check_output_file(None)
    """
    if path is None:
        return
    if os.path.isdir(path):
        raise UsageError(f"{option} {path} is a folder; give a file name, e.g. {path / 'scored.jsonl'}.")
    for source in inputs:
        if source is not None and (_same_file(path, source) or _same_file(partial_path(path), source)):
            raise UsageError(f"{option} {path} is the input {source}: writing it would destroy the input; "
                             "choose another output file.")
    path, stream = resolve_output(path, option)
    if stream:
        if resume:
            raise UsageError(f"{option} {path} is a FIFO or a device, written as a stream: there is no file to continue; "
                             "drop --resume.")
        if not os.access(path, os.W_OK):
            raise UsageError(f"{option} {path} is not writable; choose another output.")
        return
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


def check_output_dir(path: Path | None, option: str = "--output-dir", *, empty: bool = False) -> None:
    """Fail early (before the model loads) if ``path`` cannot be used as an output folder; with ``empty``,
    if it already holds files (a command without ``--overwrite`` that fills a new folder).

    Example:
        >>> check_output_dir(None)
    """
    if path is None:
        return
    if path.exists() and not path.is_dir():
        raise UsageError(f"{option} {path} is a file; give a folder (it is created if needed).")
    if empty and path.is_dir() and any(path.iterdir()):
        raise UsageError(f"{option} {path} is not empty; choose a new folder or pass --overwrite.")
    _writable_folder(path, option)


class OutputFile:
    """Write ``path`` through ``path.partial`` (locked), renamed to ``path`` by :meth:`commit`.

    Args:
        path: the output file; missing folders are created. A symbolic link is written through (the file it
            points to is replaced); a FIFO or a character device is written as a stream (:func:`resolve_output`).
        option: the option that named it, for the messages.
        resume: keep what ``path.partial`` (or, without one, ``path``) holds and append to it (read it
            with :meth:`done_lines`); otherwise start empty.

    Leaving the ``with`` block without :meth:`commit` keeps ``path.partial`` (if anything was written)
    and leaves ``path`` untouched. A write, flush or rename that fails raises :class:`OutputError`.
    """

    def __init__(self, path: Path, option: str = "--output", *, resume: bool = False) -> None:
        self.path, self.stream = resolve_output(Path(path), option)
        self.option, self.resume = option, resume
        self.partial = partial_path(self.path)
        self.handle: IO[str] | None = None
        self.committed = False

    def _failed(self, err: OSError) -> OutputError:
        where = self.path if self.stream else self.partial
        hint = {errno.ENOSPC: "; free some space, or choose a folder on another disk",
                errno.EDQUOT: "; free some of your quota, or choose a folder on another disk",
                errno.EFBIG: "; the file system or a limit does not allow a file this large"}.get(err.errno or 0, "")
        return OutputError(f"cannot write {where} ({err.strerror or err}){hint}")

    def __enter__(self) -> "OutputFile":
        if self.stream:
            if self.resume:
                raise UsageError(f"{self.option} {self.path} is a FIFO or a device: there is no file to continue; drop --resume.")
            try:  # never created, truncated or renamed over; a FIFO waits here for its reader
                self.handle = os.fdopen(os.open(self.path, os.O_WRONLY), "w", encoding="utf-8", newline="")
            except OSError as err:
                raise self._failed(err) from None
            return self
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            if self.resume and not self.partial.exists() and self.path.is_file():
                self.partial.write_bytes(self.path.read_bytes())  # complete the old output in a copy
        except OSError as err:
            self.partial.unlink(missing_ok=True)
            raise self._failed(err) from None
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
        if self.stream:
            return []
        self.handle.seek(0)  # the text layer holds nothing: the file is read and mended below it
        try:
            lines = resume_json_lines(self.handle.buffer)
            self.handle.seek(0, os.SEEK_END)
        except ValueError as error:
            raise UsageError(f"{self.partial} {error}; the file was edited or damaged: pass --overwrite to start again.") from None
        except OSError as err:
            raise self._failed(err) from None
        return lines

    def write(self, text: str) -> int:
        assert self.handle is not None
        try:
            return self.handle.write(text)
        except OSError as err:
            raise self._failed(err) from None

    def flush(self) -> None:
        """Make what was written reach the disk (a stream: its reader)."""
        assert self.handle is not None
        try:
            self.handle.flush()
            if not self.stream:
                os.fsync(self.handle.fileno())
        except OSError as err:
            raise self._failed(err) from None

    def commit(self) -> None:
        """Rename the complete file into place (still holding the lock); a stream is flushed."""
        self.flush()
        if not self.stream:
            try:
                os.replace(self.partial, self.path)
            except OSError as err:
                raise OutputError(f"cannot rename {self.partial} to {self.path} ({err.strerror or err}); "
                                  f"the complete output is in {self.partial}.") from None
        self.committed = True

    def written(self) -> bool:
        """Whether the partial file holds anything (what a failed write left included)."""
        if self.handle is None or self.stream:
            return False
        try:
            self.handle.flush()
        except OSError:  # disk full: what reached the file is kept, the rest is written again by --resume
            pass
        return os.fstat(self.handle.fileno()).st_size > 0

    def __exit__(self, *exc: Any) -> None:
        if self.handle is None:
            return
        if not self.committed and not self.stream and not self.written():
            self.partial.unlink(missing_ok=True)  # nothing to keep
        try:
            self.handle.close()
        except OSError:  # the failed write was reported; its buffer cannot be written either
            pass
        self.handle = None


class StandardOutput:
    """Standard output for a command's records: a write or flush that fails (``> /dev/full``) is an
    :class:`OutputError` (``stdout=True``); a reader that left (``| head``) stays a ``BrokenPipeError``.

    Example:
        >>> import io
        >>> out = StandardOutput(io.StringIO())
        >>> out.write("a\\n"), out.stream.getvalue()
        (2, 'a\\n')
    """

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def _call(self, action: Any, *args: Any) -> Any:
        try:
            return action(*args)
        except BrokenPipeError:
            raise
        except OSError as err:
            raise OutputError(f"cannot write standard output ({err.strerror or err})", stdout=True) from None

    def write(self, text: str) -> int:
        return self._call(self.stream.write, text)

    def flush(self) -> None:
        self._call(self.stream.flush)


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
