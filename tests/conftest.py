"""Shared fixtures: tiny random judges built locally, and the embedded SmolLM2 judge (loaded once).

Some tests read the PARAPHRASUS data in ``../shared`` beside the checkout (CI has it). Without it
they are skipped, reported on one line (``SKIPPED [N] ... ../shared is missing``), and the header
of the run says so. ``PLUIE_SHARED=/path/to/shared`` points elsewhere (e.g. from a git worktree).
"""

import json
import os
from pathlib import Path

import pytest

from pluie_reward import Judge
from pluie_reward.testing import make_tiny_judge

SHARED = Path(os.environ.get("PLUIE_SHARED") or Path(__file__).resolve().parents[1].parent / "shared")
PARAPHRASUS = SHARED / "data" / "paraphrasus"
MISSING_SHARED = f"{PARAPHRASUS} is missing: tests reading the PARAPHRASUS data need ../shared beside the checkout"


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: a slow test (the CI runs it too); deselect with -m 'not slow'")
    config.addinivalue_line("markers", "needs_shared: reads ../shared/data/paraphrasus; skipped when it is missing")


def pytest_report_header(config):
    if not PARAPHRASUS.is_dir():
        return f"note: {MISSING_SHARED}; they are skipped."
    return None


def skip_without_shared() -> None:
    """Skip the current test when ../shared is missing (one place, so pytest -ra groups the skips in one line)."""
    if not PARAPHRASUS.is_dir():
        pytest.skip(MISSING_SHARED)


def pytest_runtest_setup(item):
    if item.get_closest_marker("needs_shared") is not None:
        skip_without_shared()


def mrpc_pairs(n: int, offset: int = 0) -> tuple[list[str], list[str], list[bool]]:
    """The first ``n`` MRPC pairs of the PARAPHRASUS files (sources, hypotheses, labels)."""
    skip_without_shared()
    rows = list(json.loads((PARAPHRASUS / "ms-mrpc.json").read_text()).values())[offset : offset + n]
    return [r["sentence1"] for r in rows], [r["sentence2"] for r in rows], [r["label"] for r in rows]


def assert_records_close(got: list[dict], want: list[dict], rel: float = 1e-6, abs: float = 1e-12) -> None:
    """Lists of flat records equal key by key, numbers within tolerance (``pytest.approx`` takes no
    nested structures since pytest 9.2)."""
    assert len(got) == len(want), (len(got), len(want))
    for index, (a, b) in enumerate(zip(got, want)):
        assert a.keys() == b.keys(), (index, sorted(a), sorted(b))
        for key in a:
            if isinstance(b[key], float) and not isinstance(a[key], bool):
                assert a[key] == pytest.approx(b[key], rel=rel, abs=abs), (index, key, a[key], b[key])
            else:
                assert a[key] == b[key], (index, key, a[key], b[key])


@pytest.fixture(scope="session")
def tiny_judge() -> Judge:
    return make_tiny_judge()


@pytest.fixture(scope="session")
def embedded_judge() -> Judge:
    return Judge.load()
