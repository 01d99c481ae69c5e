"""What the two paraphrase examples share (``grpo_paraphrase.py``, ``distill_paraphraser.py``): the data
files, the policy's prompt, and the held-out metrics, so that both runs are measured the same way.
Imports no heavy library (the examples answer ``--help`` before torch loads).

Example:
    >>> chat("It rained.")[-1]["content"].endswith("Sentence: It rained.")
    True
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from pluie_reward.integrations.novelty import TASKS, copy_proof_novelty, is_copy
from pluie_reward.tools.evaluation.baselines import embedding_available, embedding_cosine

DATA = Path(__file__).resolve().parent / "data"
TRAIN_FILE = DATA / "paraphrase_train.txt"  # 120 sentences written for this example (Apache-2.0, like the package)
HELD_OUT_FILE = DATA / "paraphrase_held_out.txt"  # 24 others, never trained on (see docs/rewards.md)
# DATA / "paraphrase_dev.txt": 24 more, in neither file, on which the number of steps was chosen (docs/rewards.md)
INSTRUCTION = ("Paraphrase the sentence below: say exactly the same thing with different words and a different structure. "
               "Add nothing. Reply with the paraphrase only.\n\nSentence: {}")
# One worked example as an earlier turn (written for this example; in no data file). The prompt was chosen
# on the first 40 *training* sentences, before any run, by the base policy's greedy outputs: this one
# copied 38 % of them (novelty 0.26), the previous "Rewrite the following sentence in your own words"
# prompt without an example 53 % (0.19). See docs/rewards.md.
EXAMPLE = ("The meeting was moved to Friday because the manager was ill.",
           "Because the manager was sick, they rescheduled the meeting for Friday.")
TARGET = TASKS["paraphrase"].target  # novelty at or above which an accepted output counts as a paraphrase, not a copy


def read_sentences(path: Path) -> list[str]:
    """The sentences of ``path``: one per line, or JSONL objects with a ``source`` field (blank lines skipped).

    Raises:
        ValueError: a JSONL line that is not an object with a string ``source``, or a file without sentences.
    """
    sentences = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = line.strip()
        if not line:
            continue
        if line.startswith("{"):
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{number}: not valid JSON ({err.msg}); write one sentence per line, or "
                                 f"one JSON object with a 'source' field per line.") from None
            if not isinstance(row, dict) or not isinstance(row.get("source"), str) or not row["source"].strip():
                raise ValueError(f"{path}:{number}: a JSONL line needs a non-empty string 'source' field.")
            line = row["source"].strip()
        sentences.append(line)
    if not sentences:
        raise ValueError(f"{path}: no sentences (one per line, or JSONL with a 'source' field).")
    return sentences


STARTED = time.monotonic()


def say(message: str) -> None:
    """A progress line on stderr, ``[  12s] message`` (seconds since the example started), so that no step of a run
    over a few seconds is silent.

    Example:
        >>> say("loading the policy...")  # doctest: +SKIP
        [    3s] loading the policy...
    """
    print(f"[{time.monotonic() - STARTED:5.0f}s] {message}", file=sys.stderr, flush=True)


def chat(sentence: str) -> list[dict[str, str]]:
    """The policy's prompt for one sentence: the instruction with :data:`EXAMPLE` as a first exchange."""
    return [{"role": "user", "content": INSTRUCTION.format(EXAMPLE[0])}, {"role": "assistant", "content": EXAMPLE[1]},
            {"role": "user", "content": INSTRUCTION.format(sentence)}]


def meaning(sources: list[str], outputs: list[str]) -> float | None:
    """Mean all-MiniLM-L6-v2 cosine of outputs and sources (not the judge), or None when the
    offline package is not installed."""
    if not embedding_available():
        return None
    return sum(embedding_cosine(sources, outputs)) / len(sources)


def held_out_metrics(records: list[dict]) -> dict[str, float | None]:
    """Accept rate and mean p_yes (the judge's), mean novelty and copy rate (the copy-proof reward's
    :func:`copy_proof_novelty` and :func:`is_copy` of each output's reading, as the reward counts them: exact and
    disguised copies, the source with more around it), the share accepted with novelty at or above the target, and
    the meaning score."""
    n = len(records)
    sources = [r["source"] for r in records]
    outputs = [TASKS["paraphrase"].read(s, r["generation"]) for s, r in zip(sources, records)]
    novelties = [copy_proof_novelty(s, o) for s, o in zip(sources, outputs)]
    return {
        "accept_rate": sum(bool(r["verdict"]) for r in records) / n,
        "p_yes": sum(r["p_yes"] for r in records) / n,
        "novelty": sum(novelties) / n,
        "copy_rate": sum(is_copy(s, o) for s, o in zip(sources, outputs)) / n,
        "accepted_novel_rate": sum(bool(r["verdict"]) and v >= TARGET for r, v in zip(records, novelties)) / n,
        "pluie": sum(r["score"] for r in records) / n,
        "meaning": meaning(sources, outputs),
    }


def read_data(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Read ``args.train`` and ``args.held_out`` into ``args.train_sentences`` / ``args.held_out_sentences``
    (the first ``args.sentences`` / ``args.max_held_out`` of them); exits with status 2 and one line for an
    unreadable file, MRPC as training data, or a held-out sentence that is also a training sentence."""
    if "ms-mrpc" in args.train.name:
        parser.error("--train: MRPC is the held-out benchmark of the default judge; train on other sentences.")
    try:
        args.train_sentences = read_sentences(args.train)[: args.sentences]
        args.held_out_sentences = read_sentences(args.held_out)[: args.max_held_out]
    except (OSError, ValueError) as err:
        parser.error(str(err))
    overlap = set(args.train_sentences) & set(args.held_out_sentences)
    if overlap:
        parser.error(f"{len(overlap)} held-out sentence(s) are also training sentences (e.g. {sorted(overlap)[0]!r}): "
                     "held-out sentences must never be trained on.")


def print_held_out(result: dict) -> None:
    """Print a run's held-out outputs before and after training, then its before/after metrics."""
    for row in result["held_out"]:
        print(f"  {row['source']!r}\n    before: {row['before']!r}\n    after:  {row['after']!r}")
    for key in ("accept_rate", "p_yes", "novelty", "copy_rate", "accepted_novel_rate", "pluie", "meaning"):
        b, a = result["before"][key], result["after"][key]
        print(f"held-out {key:>20}: before {b if b is None else round(b, 3)}, after {a if a is None else round(a, 3)}")
