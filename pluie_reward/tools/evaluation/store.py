"""Scores saved as they are computed. An evaluation's output folder holds ``run.json`` (what is
scored, by which judge and templates, and what the report needs) and ``scores.jsonl`` (one line
per scored item, appended and flushed after every scoring call). A run pointed at the same folder
again skips the items already there, so an interrupted run resumes where it stopped, and
``pluie-reward eval report DIR`` recomputes every table and plot from the folder alone.

Example:
    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> with ScoreStore(folder, {"task": "demo"}, {"n": 2}) as store:
    ...     store.add([{"i": 0, "h": "x", "scores": {"PLUIE": 1.5}}])
    >>> with ScoreStore(folder, {"task": "demo"}, {"n": 2}) as again:
    ...     again.done(0, "x")["scores"]
    {'PLUIE': 1.5}
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from pathlib import Path
from typing import Any, Iterable, Mapping

from ...common.errors import PluieError
from ..shared import FileBusy, OutputFile, UsageError, complete_json_lines

RUN_FILE = "run.json"
SCORES_FILE = "scores.jsonl"
FORMAT = 1


class StoreMismatch(PluieError, ValueError):
    """The output folder holds scores of a different run (other judge, template, data...)."""


def fingerprint(*parts: Any) -> str:
    """A short stable hash of JSON-serialisable inputs (identifies an item or a template).

    Example:
        >>> fingerprint("a", 1) == fingerprint("a", 1) != fingerprint("a", 2)
        True
    """
    text = json.dumps(parts, sort_keys=True, ensure_ascii=False, default=repr)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def chat_settings(judge: Any, templates: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The chat-template keywords each template is rendered with by ``judge`` (only non-empty ones:
    Qwen3's ``enable_thinking``, the date gpt-oss writes as today...), saved with a run's settings.

    Args:
        judge: a :class:`~pluie_reward.Judge` (anything without ``bind`` gives ``{}``).
        templates: row name -> template (name, path or Template).

    Returns:
        Row name -> keywords, for the rows that have some.

    Example:
        >>> from pluie_reward.testing import make_tiny_judge
        >>> chat_settings(make_tiny_judge(chat_template_kwargs={"enable_thinking": False}), {"PLUIE": "para-fs"})
        {'PLUIE': {'enable_thinking': False}}
    """
    bind = getattr(judge, "bind", None)
    out: dict[str, dict[str, Any]] = {}
    if bind is None:
        return out
    for name, template in templates.items():
        try:
            keywords = bind(template).chat_template_kwargs
        except Exception:  # noqa: BLE001  (a template that does not bind fails when it is scored, with its message)
            continue
        if keywords:
            out[name] = dict(keywords)
    return out


def read_lines(path: Path) -> tuple[list[dict[str, Any]], int]:
    """The complete JSON lines of ``path`` and the byte length they span (:func:`~pluie_reward.tools.shared.complete_json_lines`:
    a last line cut short is rewritten on resume); none when there is no file."""
    try:
        return complete_json_lines(path.read_bytes()) if path.is_file() else ([], 0)
    except ValueError as error:
        raise StoreMismatch(f"{path}: {error}; the file was edited or corrupted.") from None


def load_run(folder: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``run.json`` and the scored lines of an output folder (for ``eval report``).

    Example:
        >>> from pluie_reward.tools.evaluation.tasks import evaluate_classification
        >>> _ = evaluate_classification(judge, {"source": ["The cat sleeps.", "Prices rose."],
        ...                                     "hypothesis": ["A cat is asleep.", "Prices fell."]}, [True, False],
        ...                             progress=False, output_dir="out/parareval")
        >>> run, lines = load_run("out/parareval")
        >>> sorted(run), len(lines), sorted(lines[0]["scores"])
        (['config', 'format', 'meta'], 2, ['PLUIE', 'bleu', 'levenshtein'])
    """
    folder = Path(folder)
    if not (folder / RUN_FILE).is_file():
        raise FileNotFoundError(
            f"{folder} has no {RUN_FILE}: give the --output-dir of an evaluation run (pluie-reward eval ... -o DIR)."
        )
    run = json.loads((folder / RUN_FILE).read_text(encoding="utf-8"))
    lines, _ = read_lines(folder / SCORES_FILE)
    return run, lines


class ScoreStore(contextlib.AbstractContextManager):
    """Append-only score file of one run in ``folder`` (or an in-memory no-op when ``folder`` is None),
    written by the tools' one JSON Lines writer (:class:`~pluie_reward.tools.shared.OutputFile`, in place).

    ``config`` identifies what is scored (task, judge, templates, baselines): a folder holding
    another configuration is refused (:class:`StoreMismatch`) unless ``overwrite``, and so is a
    folder another store holds open (the score file's lock, :class:`OutputFile`'s, taken first and released by
    :meth:`close`: one lock guards the folder's files). ``meta`` is what the report needs (names, threshold,
    paper rows...) and is rewritten on every run.
    """

    def __init__(self, folder: str | Path | None, config: Mapping[str, Any], meta: Mapping[str, Any], *, overwrite: bool = False) -> None:
        self.folder = Path(folder) if folder is not None else None
        self.lines: dict[int, dict[str, Any]] = {}
        self._file: OutputFile | None = None
        if self.folder is None:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        try:
            self._open(config, meta, overwrite)
        except FileBusy as err:  # one run writes into a folder at a time
            raise StoreMismatch(f"{self.folder}: another run is writing into this folder now (it holds the lock on "
                                f"{err.locked}); wait for it to finish, or give another --output-dir.") from None
        except UsageError as err:  # the score file is damaged, a device...
            self.close()
            raise StoreMismatch(str(err)) from None
        except BaseException:
            self.close()
            raise

    def _open(self, config: Mapping[str, Any], meta: Mapping[str, Any], overwrite: bool) -> None:
        """Open the score file (its lock first), check the folder's earlier scores (resume) and read them."""
        assert self.folder is not None
        run_path, scores_path = self.folder / RUN_FILE, self.folder / SCORES_FILE
        config = json.loads(json.dumps(config, default=repr))
        self._file = OutputFile(scores_path, "--output-dir", resume=not overwrite, in_place=True).__enter__()
        if not overwrite and scores_path.is_file() and scores_path.stat().st_size:
            old = json.loads(run_path.read_text(encoding="utf-8")).get("config") if run_path.is_file() else None
            if old != config:
                changed = sorted(k for k in set(old or {}) | set(config) if (old or {}).get(k) != config.get(k))
                raise StoreMismatch(
                    f"{self.folder} holds the scores of another run (different {', '.join(changed) or 'configuration'}); "
                    "give another --output-dir, or pass --overwrite to discard them."
                )
        self.lines = {int(line["i"]): line for line in self._file.done_lines()}  # a torn last line dropped
        run_path.write_text(json.dumps({"format": FORMAT, "config": config, "meta": dict(meta)}, indent=1,
                                       ensure_ascii=False, default=repr) + "\n", encoding="utf-8")

    def done(self, index: int, item_hash: str) -> dict[str, Any] | None:
        """The saved line of item ``index``, or ``None``; a line saved for a different item (the input
        file changed) is an error."""
        line = self.lines.get(index)
        if line is not None and line.get("h") != item_hash:
            raise StoreMismatch(
                f"{self.folder}/{SCORES_FILE}: item {index + 1} ({line.get('row', '?')}) was scored from different inputs; "
                "the input file changed since. Give another --output-dir, or pass --overwrite."
            )
        return line

    def add(self, lines: Iterable[dict[str, Any]]) -> None:
        """Append lines and make sure they reach the disk."""
        lines = list(lines)
        self.lines.update((int(line["i"]), line) for line in lines)
        if self._file is not None:
            self._file.add(lines)

    def close(self) -> None:
        """Close the score file and release the folder."""
        if self._file is not None:
            self._file.__exit__(None, None, None)
            self._file = None

    def __exit__(self, *exc: Any) -> None:
        self.close()
