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


def shared_path(relative: str) -> Path:
    """``../shared/<relative>``, or skip the calling test (or doctest) when it is missing.

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
        pytest.skip(f"{path} is missing: this test reads ../shared beside the checkout (or $PLUIE_SHARED)")
    return path
