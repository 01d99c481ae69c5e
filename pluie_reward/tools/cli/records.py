"""Reading the commands' input files (see ``FORMATS``), every problem a :class:`UsageError` that names the
file, the row and what to do. Columns may be nested: ``meta.human`` reads ``row["meta"]["human"]`` (:func:`get_path`).
"""

from __future__ import annotations

import csv
import datetime
import decimal
import errno
import json
import math
import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

from ...common.errors import invalid_text
from ...integrations.fields import map_fields, parse_assignments
from ..shared import UsageError, json_lines

JSON_SUFFIXES = {".jsonl", ".ndjson", ".json"}
FORMATS = (".jsonl/.json (one JSON object per line, a JSON array of objects or an object of objects), .csv, .tsv, "
           ".parquet, .arrow, or a datasets folder (save_to_disk)")


def get_path(row: Mapping[str, Any], column: str) -> Any:
    """The value of ``column`` in ``row``, following dots into nested objects; raises ``KeyError``.

    Example:
        >>> get_path({"a": {"b": 1}, "c.d": 2}, "a.b"), get_path({"c.d": 2}, "c.d")
        (1, 2)
    """
    if column in row:
        return row[column]
    value: Any = row
    for part in column.split("."):
        if not isinstance(value, Mapping) or part not in value:
            raise KeyError(column)
        value = value[part]
    return value


def column_names(row: Mapping[str, Any], prefix: str = "", depth: int = 2) -> list[str]:
    """Column names of a row, nested objects listed as dotted paths (``depth`` levels deep).

    Example:
        >>> column_names({"a": 1, "b": {"c": 2, "d": {"e": 3}}})
        ['a', 'b', 'b.c', 'b.d', 'b.d.e']
    """
    names = []
    for key, value in row.items():
        name = f"{prefix}{key}"
        names.append(name)
        if isinstance(value, Mapping) and depth > 0:
            names += column_names(value, name + ".", depth - 1)
    return names


@dataclass
class Records:
    """Rows of one input file, each with its location (``line N`` for text files, ``row N`` otherwise)."""

    path: Path
    rows: list[dict[str, Any]]
    locations: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.rows)

    def where(self, index: int) -> str:
        """``"<file name> line 12"``: where row ``index`` (0-based) comes from."""
        return f"{self.path.name} {self.locations[index]}"

    @property
    def columns(self) -> list[str]:
        """Column names of the first row (nested ones as dotted paths)."""
        return column_names(self.rows[0]) if self.rows else []

    def has(self, column: str) -> bool:
        """Whether the first row has ``column``."""
        try:
            get_path(self.rows[0] if self.rows else {}, column)
        except KeyError:
            return False
        return True

    def require(self, columns: Mapping[str, str], hint: str = "") -> None:
        """Check that the first row has every column (``{what it is for: column}``); one error lists all missing ones."""
        missing = {what: column for what, column in columns.items() if not self.has(column)}
        if missing:
            raise UsageError(
                f"{self.path}: no column(s) {list(missing.values())} (for {', '.join(missing)}); "
                f"columns: {self.columns}.{(' ' + hint) if hint else ''}"
            )

    def values(self, column: str, *, optional: bool = False) -> list[Any]:
        """The column's value in every row; a row without it is an error naming the row, unless
        ``optional`` (then ``None``)."""
        out = []
        for i, row in enumerate(self.rows):
            try:
                out.append(get_path(row, column))
            except KeyError:
                if not optional:
                    raise UsageError(f"{self.where(i)}: no column {column!r} (the first row has it); add it to that row "
                                     "or remove the row.") from None
                out.append(None)
        return out

    def limit(self, n: int | None) -> "Records":
        """The first ``n`` rows (all when ``n`` is None; ``--limit`` is checked to be >= 1 when parsed)."""
        return self if n is None else Records(self.path, self.rows[:n], self.locations[:n])


def text_problem(value: Any) -> str | None:
    """Why ``value`` cannot be a text field (not a string, or :func:`~pluie_reward.common.errors.invalid_text`), else
    ``None``.

    Example:
        >>> text_problem("ok"), text_problem(None), text_problem(3)
        (None, 'None is not a string', 'int 3 is not a string')
    """
    if not isinstance(value, str):
        return f"{value!r} is not a string" if value is None else f"{type(value).__name__} {value!r} is not a string"
    return invalid_text(value)


def check_texts(records: Records, columns: Mapping[str, str], optional: Iterable[str] = ()) -> dict[str, list[Any]]:
    """The values of each field's column (``{field: column}``), each checked by :func:`text_problem` (an error
    names the row, column and field); fields in ``optional`` may be missing or ``None``.

    Example:
        >>> _ = Path("pairs.jsonl").write_text('{"src": "The cat sleeps."}\\n{"src": "Prices rose."}\\n')
        >>> check_texts(read_table("pairs.jsonl"), {"source": "src"})
        {'source': ['The cat sleeps.', 'Prices rose.']}
        >>> _ = Path("bad.jsonl").write_text('{"src": "The cat sleeps."}\\n{"src": 3}\\n')
        >>> check_texts(read_table("bad.jsonl"), {"source": "src"})  # doctest: +NORMALIZE_WHITESPACE
        Traceback (most recent call last):
        ...
        pluie_reward.tools.shared.UsageError: bad.jsonl line 2: column 'src' (template field 'source'): int 3 is not a string; every item
        needs a text value there: fix or remove the row.
    """
    optional = set(optional)
    out: dict[str, list[Any]] = {}
    for name, column in columns.items():
        values = records.values(column, optional=name in optional)
        for i, value in enumerate(values):
            problem = None if value is None and name in optional else text_problem(value)
            if problem:
                raise UsageError(
                    f"{records.where(i)}: column {column!r} (template field {name!r}): {problem}; "
                    "every item needs a text value there: fix or remove the row."
                )
        out[name] = values
    return out


# reading ----------------------------------------------------------------------------------------
def read_table(path: str | Path, split: str | None = None) -> Records:
    """Read an input file (see ``FORMATS``) into :class:`Records`; raises :class:`UsageError`.

    Example:
        >>> _ = Path("pairs.csv").write_text("source,hypothesis\\nThe cat sleeps.,A cat is asleep.\\nPrices rose.,Prices fell.\\n")
        >>> read_table("pairs.csv").values("source")
        ['The cat sleeps.', 'Prices rose.']
    """
    path = Path(path)
    _check_exists(path)
    reader = {".csv": _read_delimited, ".tsv": _read_delimited, ".parquet": _read_arrow, ".arrow": _read_arrow}.get(path.suffix.lower())
    try:
        records = _read_dataset(path, split) if path.is_dir() else (reader or _read_json)(path)
    except csv.Error as err:
        raise UsageError(f"{path}: cannot read it as {path.suffix[1:]} ({err}).") from None
    except UnicodeDecodeError as err:
        raise UsageError(_not_text(path, err)) from None
    if split is not None and not path.is_dir():
        raise UsageError(f"--split applies to a datasets folder; {path} is a file.")
    if not records.rows:
        raise UsageError(f"{path} holds no items.")
    return records


def _check_exists(path: Path) -> None:
    """Refuse an input that cannot be opened: missing, a link to nothing, a link loop (tests/test_input_errors.py)."""
    try:
        os.stat(path)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise UsageError(f"input {str(path)!r} is a symbolic link loop (it leads back to itself); "
                             "fix the link, or give the file itself.") from None
        if path.is_symlink():
            raise UsageError(f"input {str(path)!r} is a symbolic link to {os.readlink(path)!r}, which does not exist.") from None
        if err.errno in (errno.ENOENT, errno.ENOTDIR):
            raise UsageError(f"input {str(path)!r} does not exist.") from None
        raise UsageError(f"input {str(path)!r}: cannot read it ({err.strerror}).") from None


# what a compressed file starts with: (magic bytes, format, command printing it decompressed, its suffix)
COMPRESSED = ((b"\x1f\x8b", "gzip", "gzip -dc", ".gz"), (b"BZh", "bzip2", "bzip2 -dc", ".bz2"),
              (b"\xfd7zXZ\x00", "xz", "xz -dc", ".xz"), (b"\x28\xb5\x2f\xfd", "zstd", "zstd -dc", ".zst"),
              (b"PK\x03\x04", "zip", "unzip -p", ".zip"))


def _not_text(path: Path, err: UnicodeDecodeError) -> str:
    """What to do with an input that is not UTF-8: decompress it, or convert it (tests/test_input_errors.py)."""
    try:
        with path.open("rb") as handle:
            start = handle.read(8)
    except OSError:
        start = b""
    for magic, name, command, suffix in COMPRESSED:
        if start.startswith(magic):
            plain = path.with_suffix("") if path.suffix.lower() == suffix else path.with_name(f"{path.stem}.plain{path.suffix}")
            return f"{path} is {name}-compressed; decompress it first, e.g. {command} {path} > {plain}"
    return (f"{path}: not UTF-8 text (byte {err.start}: {err.reason}); convert it first, e.g. "
            f"iconv -f latin1 -t utf-8 {path} > {path.with_name(f'{path.stem}.utf8{path.suffix}')}")


def _object(value: Any, path: Path, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise UsageError(
            f"{path} {where}: expected a JSON object like {{\"source\": ..., \"hypothesis\": ...}}, "
            f"got a {type(value).__name__} ({json.dumps(value, ensure_ascii=False)[:60]})."
        )
    return value


def _no_constant(name: str) -> None:
    """``NaN`` and ``Infinity`` (not strict JSON) read as None, so that the output stays strict JSON."""


def _read_json(path: Path) -> Records:
    text = path.read_text(encoding="utf-8-sig")
    if path.suffix.lower() not in JSON_SUFFIXES and not text.lstrip().startswith(("{", "[")):
        raise UsageError(f"{path}: unknown input format {path.suffix!r}; use {FORMATS}.")
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(text, parse_constant=_no_constant)
        except json.JSONDecodeError as err:
            if text.lstrip().startswith("["):
                raise UsageError(f"{path}:{err.lineno}: not valid JSON ({err.msg}).") from None
            data = None  # JSON lines in a .json file
        if isinstance(data, list):
            rows = [_object(v, path, f"item {i + 1}") for i, v in enumerate(data)]
            return Records(path, rows, [f"item {i + 1}" for i in range(len(rows))])
        if isinstance(data, dict) and data and all(isinstance(v, dict) for v in data.values()):
            # {id: {...}, ...} as in the PARAPHRASUS files
            return Records(path, list(data.values()), [f"entry {key!r}" for key in data])
        if isinstance(data, dict):
            return Records(path, [data], ["item 1"])
    rows, locations = [], []
    for number, (line, _) in enumerate(json_lines(text), 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line, parse_constant=_no_constant)
        except json.JSONDecodeError as err:
            raise UsageError(f"{path}:{number}: not valid JSON ({err.msg}); each line must hold one JSON object.") from None
        rows.append(_object(value, path, f"line {number}"))
        locations.append(f"line {number}")
    return Records(path, rows, locations)


def _check_header(path: Path, header: Sequence[str]) -> None:
    """A column named twice in a CSV/TSV header is an error (reading it by name would take the last one).

    Example:
        >>> _check_header(Path("pairs.csv"), ["source", "hypothesis", "source"])  # doctest: +NORMALIZE_WHITESPACE
        Traceback (most recent call last):
        ...
        pluie_reward.tools.shared.UsageError: pairs.csv: the header names the column(s) ['source'] twice; rename one of each (a column is
        read by its name).
    """
    twice = sorted({name for name in header if list(header).count(name) > 1})
    if twice:
        raise UsageError(f"{path}: the header names the column(s) {twice} twice; rename one of each "
                         "(a column is read by its name).")


@contextmanager
def _long_cells() -> Iterator[None]:
    """Let the csv module read cells of any length (its default stops at 131,072 characters), then restore its limit."""
    limit = csv.field_size_limit(2**31 - 1)
    try:
        yield
    finally:
        csv.field_size_limit(limit)


def _read_delimited(path: Path) -> Records:
    """CSV, or TSV (``.tsv``): tab-separated text without quoting (as MRPC's and PAWS's files), a quote a character of its cell.

    Example:
        >>> _ = Path("pairs.tsv").write_text('source\\thypothesis\\n"The cat," he said.\\tA cat.\\n')
        >>> read_table("pairs.tsv").rows
        [{'source': '"The cat," he said.', 'hypothesis': 'A cat.'}]
    """
    tsv = path.suffix.lower() == ".tsv"
    fix = "TSV is read without quoting: fix that row, or use CSV or JSONL" if tsv else "fix that row (quote values that contain ',')"
    rows, locations = [], []
    # -sig: a UTF-8 BOM is not part of the first column
    with path.open(newline="", encoding="utf-8-sig") as handle, _long_cells():
        reader = csv.DictReader(handle, delimiter="\t" if tsv else ",", quoting=csv.QUOTE_NONE if tsv else csv.QUOTE_MINIMAL)
        header = reader.fieldnames
        if not header:
            return Records(path, [], [])
        _check_header(path, header)
        for row in reader:
            where = f"line {reader.line_num}"
            short = [k for k, v in row.items() if v is None]
            if short or None in row:
                cells = len(header) + len(row.get(None, ())) - len(short)
                cut = f"no value for {short}" if short else f"a {'tab' if tsv else 'comma'} inside a value splits it"
                raise UsageError(f"{path} {where}: {cells} cell{'s' * (cells != 1)} but the header has {len(header)} "
                                 f"({cut}); {fix}.")
            rows.append(row)
            locations.append(where)
    return Records(path, rows, locations)


def as_json_value(value: Any) -> Any:
    """``value`` (nested too) with Parquet's and Arrow's dates, times and decimals as text (ISO 8601, the digits)
    and a NaN or infinite float (a missing value) as None, JSON's null.

    Example:
        >>> import datetime, decimal
        >>> as_json_value({"day": datetime.date(2024, 1, 2), "prices": [decimal.Decimal("1.50")], "n": 3})
        {'day': '2024-01-02', 'prices': ['1.50'], 'n': 3}
        >>> as_json_value([float("nan"), 0.5])
        [None, 0.5]
    """
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (datetime.date, datetime.time)):  # datetime.datetime is a date
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, dict):
        return {key: as_json_value(v) for key, v in value.items()}
    if isinstance(value, list):
        return [as_json_value(v) for v in value]
    return value


def _from_rows(path: Path, rows: list[dict[str, Any]]) -> Records:
    rows = [as_json_value(row) for row in rows]
    return Records(path, rows, [f"row {i + 1}" for i in range(len(rows))])


def _read_arrow(path: Path) -> Records:
    """A Parquet file, or an Arrow stream (the ``.arrow`` files of a datasets folder), read by pyarrow (which reads a
    Parquet file without rows too: ``datasets`` fails on it, "BatchSize must be > 0")."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        if path.suffix.lower() == ".parquet":
            table = pq.read_table(path)
        else:
            with pa.memory_map(str(path)) as source:
                table = pa.ipc.open_stream(source).read_all()
    except Exception as err:  # pyarrow raises its own error types
        raise UsageError(f"{path}: cannot read it as {path.suffix[1:]} ({type(err).__name__}: {err}).") from None
    return _from_rows(path, table.to_pylist())


def _read_dataset(path: Path, split: str | None) -> Records:
    import datasets

    was = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()  # while it reads
    try:
        dataset = datasets.load_from_disk(str(path))
    except FileNotFoundError:
        raise UsageError(f"{path} is a folder but not a datasets folder (save_to_disk); give a file ({FORMATS}).") from None
    finally:
        if was:
            datasets.enable_progress_bars()
    if isinstance(dataset, datasets.DatasetDict):
        splits = list(dataset)
        if split is None and len(splits) == 1:
            split = splits[0]
        if split not in dataset:
            raise UsageError(f"{path} holds the splits {splits}; choose one with --split NAME.")
        dataset = dataset[split]
    elif split is not None:
        raise UsageError(f"{path} is a single dataset without splits; drop --split.")
    return _from_rows(path, dataset.to_list())


def parse_columns(specs: Sequence[str], fields: Sequence[str], optional: Sequence[str] = ()) -> dict[str, str | None]:
    """Field -> input column from repeated ``FIELD=COLUMN`` (default: the field's name; ``FIELD=`` leaves an optional
    field out), through :func:`pluie_reward.integrations.fields.map_fields` (its ``ValueError`` names ``--column``).

    Example:
        >>> parse_columns(["source=s1", "gold="], ["source", "hypothesis"], ["gold"])
        {'source': 's1', 'hypothesis': 'hypothesis', 'gold': None}
    """
    mapping = map_fields(fields, parse_assignments(specs, "--column"), optional=optional, setting="--column")
    return {f: mapping.columns.get(f) for f in [*fields, *optional]}