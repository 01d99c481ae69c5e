"""The checks of a command's output files and folders, made before anything loads, and standard output for
records; the files are written by :class:`~pluie_reward.tools.shared.OutputFile`, re-exported here."""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO, Any, Iterable

from ..shared import (FileBusy, OutputError, OutputFile, UsageError, check_output_dir, lock_file, partial_path, same_file,
                      writable_folder)

__all__ = ["OutputError", "OutputFile", "StandardOutput", "check_output_dir", "check_output_file", "partial_path",
           "write_text_file"]


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
        UsageError: a folder, an unwritable place, an input, an existing or locked file, a stream with ``resume``.

    Example:
        >>> check_output_file(None)
    """
    if path is None:
        return
    if os.path.isdir(path):
        raise UsageError(f"{option} {path} is a folder; give a file name, e.g. {path / 'scored.jsonl'}.")
    for source in inputs:
        if source is not None and any(same_file(p, source) for p in (path, partial_path(path))):
            raise UsageError(f"{option} {path} is the input {source}: writing it would destroy the input; "
                             "choose another output file.")
    out = OutputFile(path, option, resume=bool(resume))  # where it is written (links resolved); no --resume on a stream
    path = out.path
    if out.stream:
        if not os.access(path, os.W_OK):
            raise UsageError(f"{option} {path} is not writable; choose another output.")
        return
    writable_folder(path.parent, option)
    partial = out.partial
    if partial.is_file():
        with partial.open("rb") as handle:
            if not lock_file(handle.fileno()):
                raise FileBusy(path, option, partial)
        if overwrite is False and not resume:
            how = "pass --resume to continue it, or --overwrite to start again" if resume is not None else \
                "pass --overwrite to write the file again"
            raise UsageError(f"{option} {path}: an interrupted run left {partial}; {how}.")
    if overwrite is False and not resume and path.exists():
        how = " (or --resume to complete it)" if resume is not None else ""
        raise UsageError(f"{option} {path} exists; pass --overwrite to replace it{how}, or choose another output file.")


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
            raise OutputError(f"cannot write standard output ({err.strerror or err}).", stdout=True) from None

    def write(self, text: str) -> int:
        return self._call(self.stream.write, text)

    def flush(self) -> None:
        self._call(self.stream.flush)

    def __getattr__(self, name: str) -> Any:  # the stream's other attributes (fileno, isatty, encoding...)
        return getattr(self.stream, name)

    add = OutputFile.add  # records as JSON lines, as into a file


def write_text_file(path: Path, text: str, option: str = "--output") -> Path:
    """Write a whole text file through :class:`OutputFile` (renamed into place complete, locked while written).

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
