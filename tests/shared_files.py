"""The one way the tests reach ``../shared`` (the seeds' texts, real tokenizers, the PARAPHRASUS data):
:func:`shared_path`, which skips the calling test, naming the missing path, when it is not there.

A clone with nothing beside it passes its tests (``.ci/run`` checks): a test that reads ``../shared``
skips. The folder is looked for beside the checkout this file belongs to (so a clone never reads
another checkout's ``../shared``); ``PLUIE_SHARED=/path/to/shared`` points elsewhere. Both conftest
files import this module (``conftest.py`` for the doctests, ``tests/conftest.py`` for the tests).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SHARED = Path(os.environ.get("PLUIE_SHARED") or Path(__file__).resolve().parents[2] / "shared")
# A folder that is missing must never be asked of the Hub (a path transformers does not find is a Hub id).
os.environ.setdefault("HF_HUB_OFFLINE", "1")


# What each folder of ../shared holds and where it comes from: a skipped test's message says it.
WHAT = {
    "data/paraphrasus": "the PARAPHRASUS benchmark's JSON files (Michail et al., COLING 2025; the datasets_no_results folder of "
                        "https://github.com/impresso/paraphrasus; docs/evaluation.md, The PARAPHRASUS data)",
    "tokenizers": "real tokenizers (no weights) of judge families: Mistral-7B-Instruct-v0.2, Llama-3-8B-Instruct, Qwen2.5-7B-"
                  "Instruct, Qwen3-8B, gpt-oss-20b, as their publishers give them on the Hugging Face Hub (one folder each)",
    "seeds": "the papers as text (ParaPLUIE and PARAPHRASUS, COLING 2025; *-PLUIE, 2026), whose numbers the tests check",
}


def shared_path(relative: str) -> Path:
    """``../shared/<relative>``, or skip the calling test (or doctest) when it is missing, saying what the missing data
    is and where it comes from (:data:`WHAT`).

    Args:
        relative: a path inside ``../shared``, e.g. ``"seeds/star-pluie_2026.txt"``.

    Returns:
        The path, which exists.

    Example:
        >>> shared_path("data/paraphrasus").name  # skipped where ../shared is missing
        'paraphrasus'
    """
    path = SHARED / relative
    if not path.exists():
        what = next((text for folder, text in WHAT.items() if relative.startswith(folder)), "data kept beside the checkout")
        pytest.skip(f"{path} is missing ({what}): this test reads it from ../shared beside the checkout, or from $PLUIE_SHARED")
    return path
