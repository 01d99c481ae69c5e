"""What the tools' library code shares with the command line (which it never imports): :class:`UsageError`,
a scoring loop's chunk size and progress line (:class:`Progress`), the one resumable JSON Lines writer
(:class:`OutputFile`), and the ``type=`` checks of numeric and comma-list options (:func:`finite_float`,
:func:`comma_list`...), which refuse ``nan``, ``inf`` and out-of-range numbers while the command line is parsed
(exit code 2, the message names the option).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import hashlib
import json
import math
import os
import re
import stat
import sys
import tempfile
import threading
import time
from pathlib import Path

try:  # POSIX
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]
from typing import IO, Any, AnyStr, Callable, Iterable, Iterator, Sequence, TextIO

from ..common.errors import PluieError


class UsageError(PluieError):
    """Bad input from the command line: printed without a traceback, exit code 2."""


def auto_chunk_size(judge: Any, prompts_per_item: int = 1) -> int:
    """Items per ``Judge.score`` call when ``--chunk-size`` is not given: about one forward batch of prompts
    (``batch_tokens`` / 64: 8 on CPU, 64 on GPU; an item with two candidates is two prompts).

    Example:
        >>> auto_chunk_size(None), auto_chunk_size(None, prompts_per_item=2)
        (8, 4)
    """
    tokens = judge.engine.batch_tokens if judge is not None else 512
    prompts = int(tokens) // 64 if isinstance(tokens, int) else 8
    return max(1, prompts // max(1, prompts_per_item))


HEARTBEAT_S = 10.0  # the longest a Progress line stays silent in its ``with`` block

class Progress(contextlib.AbstractContextManager):
    """A progress line on stderr: redrawn in place on a terminal, elsewhere (a log) one line per tenth of the
    work, the final state printed once (tqdm's update and close print it twice); inside a ``with`` block, never
    silent for more than :data:`HEARTBEAT_S` seconds (a line with the time elapsed: a load, a slow first chunk).

    Args:
        total: the units of work (0: a phase without a count, e.g. a load: only the time elapsed is shown).
        desc: what is done (``"scoring"``); ``units``: what is counted (plural).
        initial: units already done (a resumed run).
        enabled: ``False`` prints nothing (``--no-progress``).

    Example:
        >>> import io
        >>> out = io.StringIO()
        >>> with Progress(3, "scoring", stream=out) as bar:
        ...     bar.update(2)
        ...     bar.update(1)
        >>> print(out.getvalue(), end="")  # not a terminal: one line per tenth of the work
        scoring: 2/3 items (66%)
        scoring: 3/3 items (100%)
    """

    shown: tuple[Any, float] = (None, 0.0)  # the stream a Progress line was last shown on, and when

    def __init__(self, total: int, desc: str, units: str = "items", initial: int = 0, enabled: bool = True,
                 stream: TextIO | None = None) -> None:
        self.total, self.desc, self.units, self.done, self.enabled = total, desc, units, initial, enabled
        self.stream = stream if stream is not None else sys.stderr
        self.live = enabled and bool(getattr(self.stream, "isatty", lambda: False)())
        self.start = time.monotonic()
        stream, shown = Progress.shown  # a heartbeat comes HEARTBEAT_S after the last line of any bar on this stream:
        self.last = shown if stream is self.stream and self.start - shown < HEARTBEAT_S else self.start
        self.tenth = self._tenth()
        self.width = 0
        self.lock, self.stopped = threading.Lock(), threading.Event()
        if self.live:
            self._show()

    def __enter__(self) -> "Progress":
        if self.enabled:  # the heartbeat: a daemon thread, until close()
            threading.Thread(target=self._beat, args=(HEARTBEAT_S,), daemon=True).start()
        return self

    def _beat(self, every: float) -> None:
        while not self.stopped.wait(min(0.5, every / 4)):
            with self.lock:
                if not self.stopped.is_set() and time.monotonic() - self.last >= every:
                    self._show(elapsed=True)

    def _tenth(self) -> int:
        return 10 * self.done // max(1, self.total)

    def _line(self, elapsed: bool = False) -> str:
        line = f"{self.desc}: {self.done}/{self.total} {self.units} ({100 * self.done // max(1, self.total)}%)" if self.total else self.desc
        seconds = time.monotonic() - self.start
        if (elapsed or (self.live and self.done) or not self.total) and seconds >= 1:
            line += f"{', ' if self.total else ': '}{seconds:.0f} s"
        return line

    def _show(self, elapsed: bool = False) -> None:
        """Redraw the line on a terminal (spaces over a longer line drawn before), else print it."""
        line = self._line(elapsed)
        self.stream.write("\r" + line.ljust(self.width) if self.live else line + "\n")
        self.stream.flush()
        self.width, self.last = len(line), time.monotonic()
        Progress.shown = (self.stream, self.last)

    def update(self, n: int) -> None:
        """``n`` more units are done."""
        with self.lock:
            self.done += n
            if self.enabled and n and (self.live or self._tenth() > self.tenth or self.done >= self.total):
                self.tenth = self._tenth()
                self._show()

    def close(self) -> None:
        """End the line (the final state is already printed, and is not printed again) and the heartbeat."""
        self.stopped.set()
        with self.lock:
            if self.live:  # a line is drawn on the terminal and not yet ended
                self.stream.write("\n")
                self.stream.flush()
                self.live = False

    def __exit__(self, *exc: Any) -> None:
        self.close()


_ITEM = re.compile(r"\bitem (\d+)\b")


def relocate(message: str, rows: Sequence[str], per_item: int = 1) -> str:
    """Rewrite "item k" of a ``Judge.score`` error as the input row it came from (``per_item``: entries per row).

    Example:
        >>> relocate("field 'hypothesis', item 3: expected a string", ["a.jsonl line 8", "a.jsonl line 9"], per_item=2)
        "field 'hypothesis', a.jsonl line 9: expected a string"
    """
    def swap(match: re.Match) -> str:
        k = int(match.group(1)) // per_item
        return rows[k] if k < len(rows) else match.group(0)

    return _ITEM.sub(swap, message)


def writable_folder(folder: Path, option: str, error: type[Exception] = UsageError) -> None:
    """Raise ``error`` naming ``option`` when nothing can be written in ``folder`` or in its nearest existing parent."""
    for parent in [folder, *folder.parents]:
        if parent.exists():
            if not parent.is_dir():
                raise error(f"{option}: {parent} is a file, so nothing can be written under it; choose another path.")
            if not os.access(parent, os.W_OK | os.X_OK):
                raise error(f"{option}: {parent} is not writable; choose another path.")
            try:  # what access() cannot tell (root on /proc, a read-only mount...): make and remove a folder there
                os.rmdir(tempfile.mkdtemp(prefix=".pluie-check-", dir=parent))
            except OSError as err:
                raise error(f"{option}: nothing can be written in {parent} ({err.strerror}); choose another path.") from None
            return


def check_output_dir(path: str | Path | None, option: str = "--output-dir", *, empty: bool = False,
                     overwrite: str = "--overwrite", error: type[Exception] = UsageError) -> Path | None:
    """Fail early (before a model loads) when ``path`` cannot be an output folder.

    Args:
        path: the folder (created later if needed); ``None``: nothing to check.
        option: its name in the messages (``"--output"``, or ``"output_dir"`` for a library call).
        empty: refuse a folder that already holds files.
        overwrite: what allows that, as the message says it (``"--overwrite"``, ``"overwrite=True"``).
        error: the exception raised (the library raises ``ValueError``).

    Returns:
        ``path`` as a ``Path`` (``None`` for ``None``).

    Example:
        >>> check_output_dir(None)
        >>> check_output_dir(Path(__file__), "output_dir", error=ValueError)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ValueError: output_dir .../shared.py is a file; give a folder (it is created if needed).
    """
    if path is None:
        return None
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise error(f"{option} {path} is a file; give a folder (it is created if needed).")
    if empty and path.is_dir() and any(path.iterdir()):
        raise error(f"{option} {path} is not empty; choose a new folder or pass {overwrite}.")
    writable_folder(path, option, error)
    return path


def lock_file(fd: int) -> bool:
    """Take an exclusive ``flock`` on an open file or folder while it stays open (a killed run leaves none), or
    say ``False`` at once when another process holds it (always ``True`` without ``fcntl``).

    Example:
        >>> import os, tempfile
        >>> folder = tempfile.mkdtemp()
        >>> one, two = os.open(folder, os.O_RDONLY), os.open(folder, os.O_RDONLY)
        >>> lock_file(one), lock_file(two)
        (True, False)
        >>> os.close(one); lock_file(two)
        True
        >>> os.close(two)
    """
    if fcntl is None:  # pragma: no cover
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def json_lines(data: AnyStr) -> Iterator[tuple[AnyStr, int]]:
    r"""The lines of JSON Lines text (or bytes), each with the offset just past its end: split on ``"\n"`` only
    (not ``str.splitlines()``: JSON strings may hold U+2028, U+2029, ``\x85`` raw), a ``"\r"`` before it dropped.

    Example:
        >>> [line for line, _ in json_lines('{"a": "x\u2028y"}\r\n{"b": 2}\n')]
        ['{"a": "x\u2028y"}', '{"b": 2}']
        >>> list(json_lines(b'{"a": 1}\n{"b"'))
        [(b'{"a": 1}', 9), (b'{"b"', 13)]
    """
    newline, cr = ("\n", "\r") if isinstance(data, str) else (b"\n", b"\r")
    end = 0
    for line in data.split(newline):  # type: ignore[arg-type]
        if end >= len(data):  # the empty piece after a last newline
            break
        end = min(end + len(line) + 1, len(data))
        yield line.removesuffix(cr), end  # type: ignore[arg-type]


def complete_json_lines(data: bytes) -> tuple[list[Any], int]:
    r"""The records an interrupted writer left in JSON Lines ``data`` and the byte length they span (a last line
    cut short left out).

    Raises:
        ValueError: ``"line N is not valid JSON"`` for a bad line before the last (an edited or damaged file).

    Example:
        >>> complete_json_lines(b'{"a": 1}\n\n{"b": 2}\n{"c"')
        ([{'a': 1}, {'b': 2}], 19)
        >>> complete_json_lines(b'{"a": 1}\n{"b"\n{"c": 3}\n')
        Traceback (most recent call last):
        ValueError: line 2 is not valid JSON
    """
    lines, good = [], 0
    for raw, end in json_lines(data):
        if raw.strip():
            try:
                lines.append(json.loads(raw))
            except json.JSONDecodeError:
                if end >= len(data):  # the last line, cut short
                    break
                raise ValueError(f"line {len(lines) + 1} is not valid JSON") from None
        good = end
    return lines, good


def resume_json_lines(handle: IO[bytes]) -> list[Any]:
    r"""Make a JSON Lines file an interrupted writer left ready to append to and return its complete records: a
    last line cut short is cut off, a last record without its newline gets one; the handle is left at the end.

    Args:
        handle: the file open in binary mode for reading and writing (``"r+b"``, or a text handle's ``.buffer``).

    Example:
        >>> import io
        >>> torn, unended = io.BytesIO(b'{"a": 1}\n{"b"'), io.BytesIO(b'{"a": 1}\n{"b": 2}')
        >>> resume_json_lines(torn), torn.getvalue()
        ([{'a': 1}], b'{"a": 1}\n')
        >>> resume_json_lines(unended), unended.getvalue()
        ([{'a': 1}, {'b': 2}], b'{"a": 1}\n{"b": 2}\n')
    """
    handle.seek(0)
    data = handle.read()
    lines, good = complete_json_lines(data)
    handle.truncate(good)
    handle.seek(good)
    if good and data[good - 1 : good] != b"\n":  # interrupted between a record and its newline
        handle.write(b"\n")
    return lines


# the resumable output file ------------------------------------------------------------------------
PARTIAL = ".partial"


class OutputError(UsageError):
    """An output that could not be written (disk full, a closed or full standard output...)."""

    def __init__(self, message: str, stdout: bool = False) -> None:
        super().__init__(message)
        self.stdout = stdout  # standard output failed: nothing more may be flushed to it at exit


def _name_max(folder: Path) -> int:
    """The longest file name (bytes) the file system of ``folder`` (or of its nearest existing parent) allows."""
    existing = next((parent for parent in [folder, *folder.parents] if parent.is_dir()), folder)
    with contextlib.suppress(OSError, ValueError):
        return int(os.pathconf(existing, "PC_NAME_MAX"))
    return 255


def partial_path(path: Path) -> Path:
    """Where ``path`` is written until the run succeeds: ``path`` + ``.partial``; a name too long for the file
    system keeps its start and gets a hash of the whole name before ``.partial`` (the same every run).

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
    """Whether resolving the link ``path`` passes through ``/proc`` (``/dev/stdout``): a file a process holds open."""
    current = Path(os.path.abspath(path))
    for _ in range(40):
        if str(current).startswith("/proc/") or not current.is_symlink():
            break
        current = Path(os.path.abspath(current.parent / os.readlink(current)))
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
    too_long = f"{option} {path}: the name is longer than the file system allows ({_name_max(path.parent)} bytes); choose a shorter name."
    try:
        mode = os.stat(path).st_mode
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise UsageError(f"{option} {path} is a symbolic link loop (it leads back to itself); "
                             "fix or remove the link, or choose another output file.") from None
        if err.errno == errno.ENAMETOOLONG:
            raise UsageError(too_long) from None
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
        raise UsageError(too_long)
    return path, False


class FileBusy(UsageError):
    """Another command holds the lock on an output file (:func:`lock_file` on the file :class:`OutputFile` writes)."""

    def __init__(self, path: Path, option: str, locked: Path) -> None:
        self.locked = locked
        super().__init__(f"{option} {path}: another command is writing it now (it holds the lock on {locked}); "
                         "wait for it to finish, or choose another output file.")


def same_file(a: Path | int, b: Path | int) -> bool:
    """Whether ``a`` and ``b`` (paths or open file descriptors) are one file (``False`` when one cannot be read)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


class OutputFile:
    r"""The one resumable JSON Lines writer of the tools (``score --output``, an evaluation's ``scores.jsonl``,
    every whole file a command writes).

    The file is written as ``path.partial`` (:func:`partial_path`), renamed to ``path`` by :meth:`commit`: an
    interrupted run leaves ``path`` as it was and its rows in ``path.partial`` (``--resume`` continues it).
    While writing it holds a lock (:func:`lock_file`): a second writer is refused. Links, FIFOs and devices are
    handled as :func:`resolve_output` says (a stream has no partial file, lock or resume). A failed write,
    flush or rename is an :class:`OutputError` that names the file.

    Args:
        path: the output file.
        option: the option that named it, for the messages.
        resume: keep what the file holds (``path.partial``, or, without one, ``path``) and append to it (read
            it with :meth:`done_lines`); otherwise start empty.
        in_place: write ``path`` itself, appending; :meth:`commit` only makes it reach the disk.

    Example:
        >>> import tempfile
        >>> target = Path(tempfile.mkdtemp()) / "out" / "scored.jsonl"
        >>> with OutputFile(target) as out:
        ...     out.add([{"a": 1}, {"b": "é"}])
        ...     out.commit()
        >>> target.read_text(encoding="utf-8"), partial_path(target).exists()
        ('{"a": 1}\n{"b": "é"}\n', False)
        >>> _ = target.write_bytes(b'{"a": 1}\n{"b": "')  # what an interrupted writer left
        >>> with OutputFile(target, resume=True, in_place=True) as out:
        ...     out.done_lines()
        ...     out.add([{"b": 2}])
        [{'a': 1}]
        >>> target.read_text()
        '{"a": 1}\n{"b": 2}\n'
    """

    def __init__(self, path: Path, option: str = "--output", *, resume: bool = False, in_place: bool = False) -> None:
        self.path, self.stream = resolve_output(Path(path), option)
        if self.stream and resume:
            raise UsageError(f"{option} {self.path} is a FIFO or a device, written as a stream: there is no file to continue; "
                             "drop --resume.")
        self.option, self.resume, self.in_place = option, resume, in_place
        self.partial = self.path if in_place else partial_path(self.path)
        self.handle: IO[str] | None = None
        self.committed = False

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """An ``OSError`` inside (disk full...) is an :class:`OutputError` that names the file."""
        try:
            yield
        except OSError as err:
            where = self.path if self.stream else self.partial
            hint = {errno.ENOSPC: "; free some space, or choose a folder on another disk",
                    errno.EDQUOT: "; free some of your quota, or choose a folder on another disk",
                    errno.EFBIG: "; the file system or a limit does not allow a file this large"}.get(err.errno or 0, "")
            raise OutputError(f"cannot write {where} ({err.strerror or err}){hint}.") from None

    def __enter__(self) -> "OutputFile":
        if self.stream:
            with self._writing():  # never created, truncated or renamed over; a FIFO waits here for its reader
                self.handle = os.fdopen(os.open(self.path, os.O_WRONLY), "w", encoding="utf-8", newline="")
            return self
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._writing():
            try:
                if self.resume and not self.partial.exists() and self.path.is_file():
                    self.partial.write_bytes(self.path.read_bytes())  # complete the old output in a copy
            except OSError:
                self.partial.unlink(missing_ok=True)
                raise
        fd = os.open(self.partial, os.O_RDWR | os.O_CREAT, 0o666)
        if not lock_file(fd) or not same_file(self.partial, fd):  # renamed by a writer that just finished
            os.close(fd)
            raise FileBusy(self.path, self.option, self.partial)
        if not self.resume:
            os.ftruncate(fd, 0)
        self.handle = os.fdopen(fd, "r+", encoding="utf-8", newline="")
        self.handle.seek(0, os.SEEK_END)
        return self

    def done_lines(self) -> list[dict[str, Any]]:
        """The complete JSON lines already in the file (resuming), the file mended by :func:`resume_json_lines`."""
        assert self.handle is not None
        if self.stream:
            return []
        self.handle.seek(0)  # the text layer holds nothing: the file is read and mended below it
        try:
            with self._writing():
                lines = resume_json_lines(self.handle.buffer)
                self.handle.seek(0, os.SEEK_END)
        except ValueError as error:
            raise UsageError(f"{self.partial}: {error}; the file was edited or damaged: pass --overwrite to start again.") from None
        return lines

    def write(self, text: str) -> int:
        assert self.handle is not None
        with self._writing():
            return self.handle.write(text)

    def add(self, records: Iterable[Any]) -> None:
        """Write ``records`` as JSON lines (UTF-8 kept as is) and make them reach the disk (:meth:`flush`)."""
        self.write("".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records))
        self.flush()

    def flush(self) -> None:
        """Make what was written reach the disk (a stream: its reader)."""
        assert self.handle is not None
        with self._writing():
            self.handle.flush()
            if not self.stream:
                os.fsync(self.handle.fileno())

    def commit(self) -> None:
        """Rename the complete file into place (still holding the lock); a stream or a file written in place is flushed."""
        self.flush()
        if not self.stream and not self.in_place:
            try:
                os.replace(self.partial, self.path)
            except OSError as err:
                raise OutputError(f"cannot rename {self.partial} to {self.path} ({err.strerror or err}); "
                                  f"the complete output is in {self.partial}.") from None
        self.committed = True

    def __exit__(self, *exc: Any) -> None:
        if self.handle is None:
            return
        if not self.committed and not self.stream and not self.in_place:
            with contextlib.suppress(OSError):  # disk full: what reached the file is kept, --resume writes the rest
                self.handle.flush()
            if not os.fstat(self.handle.fileno()).st_size:
                self.partial.unlink(missing_ok=True)  # nothing to keep
        with contextlib.suppress(OSError):  # the failed write was reported; its buffer cannot be written either
            self.handle.close()
        self.handle = None


def log_ratio(value: Any) -> float:
    """A PLUIE log-ratio read from a data file's cell: a finite number (not a boolean), else a ``ValueError``.

    Example:
        >>> log_ratio("1.5"), log_ratio(-2)
        (1.5, -2.0)
        >>> log_ratio("high")
        Traceback (most recent call last):
        ...
        ValueError: 'high' is not a number (a PLUIE log-ratio)
    """
    try:
        number = float(value)
        if isinstance(value, bool):
            raise TypeError
    except (TypeError, ValueError):
        raise ValueError(f"{value!r} is not a number (a PLUIE log-ratio)") from None
    if not math.isfinite(number):
        raise ValueError(f"{value!r} is not finite")
    return number


# numeric fields of the tools' configs ---------------------------------------------------------------
def check_number(name: str, value: Any, what: str, ok: Callable[[Any], bool], kinds: type | tuple[type, ...] = (int, float)) -> Any:
    """``value`` when it is a finite number of ``kinds`` (never a bool) and ``ok``; else a ``ValueError`` saying what
    ``name`` must be (the ``__post_init__`` checks of ``TuneConfig`` and ``CalibrationConfig``).

    Example:
        >>> check_number("seed", 3, "a whole number >= 0", lambda v: v >= 0, int)
        3
        >>> check_number("l2", float("inf"), "a finite number >= 0", lambda v: v >= 0)
        Traceback (most recent call last):
        ...
        ValueError: l2 must be a finite number >= 0, got inf.
    """
    if isinstance(value, bool) or not isinstance(value, kinds) or not math.isfinite(value) or not ok(value):
        raise ValueError(f"{name} must be {what}, got {value!r}.")
    return value


# numeric command-line options --------------------------------------------------------------------
def _number_type(kind: type, ok: Callable[[Any], bool], what: str) -> Callable[[str], Any]:
    """The ``type=`` of a numeric option: the text read as ``kind``, finite, and ``ok`` (else "must be ``what``").

    Example:
        >>> finite_float("-1.5"), positive_float("0.5"), nonneg_float("0"), positive_int("8"), nonneg_int("0"), port("8000")
        (-1.5, 0.5, 0.0, 8, 0, 8000)
        >>> finite_float("nan")
        Traceback (most recent call last):
        ...
        argparse.ArgumentTypeError: must be a finite number, got 'nan'.
    """
    def check(text: str) -> Any:
        try:
            value = kind(text)
        except (TypeError, ValueError):
            what_kind = "a whole number" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"expected {what_kind}, got {text!r}.") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}.")
        if not ok(value):
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}.")
        return value

    return check


finite_float = _number_type(float, lambda v: True, "")  # a threshold, a log-ratio
whole_int = _number_type(int, lambda v: True, "")  # a whole number its config checks (-1 may mean "unset")
positive_float = _number_type(float, lambda v: v > 0, "a finite number > 0")  # a rate, a size, a duration
nonneg_float = _number_type(float, lambda v: v >= 0, "a finite number >= 0")  # a margin, a penalty, a share
positive_int = _number_type(int, lambda v: v >= 1, "a whole number >= 1")  # items, steps, tokens
nonneg_int = _number_type(int, lambda v: v >= 0, "a whole number >= 0")  # a seed; a count where 0 means "skip"
port = _number_type(int, lambda v: 1 <= v <= 65535, "a port between 1 and 65535")  # a TCP port to listen on


def comma_list(choices: Sequence[Any] | None = None, unique: bool = False) -> Callable[[str], list[Any]]:
    """The ``type=`` of a comma-separated option: its non-empty items.

    Args:
        choices: the allowed items, or None for any.
        unique: refuse an item given twice.

    Example:
        >>> comma_list()("mrpc, grpo,")
        ['mrpc', 'grpo']
        >>> comma_list(choices=["mrpc", "grpo"])("mrpc,stsb")
        Traceback (most recent call last):
        ...
        argparse.ArgumentTypeError: choose a comma-separated list from mrpc, grpo; got 'mrpc,stsb'.
    """
    def check(text: str) -> list[Any]:
        items = [t.strip() for t in text.split(",") if t.strip()]
        allowed = f" from {', '.join(map(str, choices))}" if choices is not None else ""
        unknown = choices is not None and not set(items) <= set(choices)
        if not items or unknown or (unique and len(set(items)) != len(items)):
            repeats = " without repeats" if unique else ""
            raise argparse.ArgumentTypeError(f"choose a comma-separated list{allowed}{repeats}; got {text!r}.")
        return items

    return check
