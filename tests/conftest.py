"""Shared fixtures: tiny random judges built locally, and the embedded SmolLM2 judge (loaded once)."""

import json
from pathlib import Path

import pytest

from pluie_reward import Judge
from pluie_reward.testing import make_tiny_judge

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
PARAPHRASUS = SHARED / "data" / "paraphrasus"


def mrpc_pairs(n: int, offset: int = 0) -> tuple[list[str], list[str], list[bool]]:
    """The first ``n`` MRPC pairs of the PARAPHRASUS files (sources, hypotheses, labels)."""
    path = PARAPHRASUS / "ms-mrpc.json"
    if not path.is_file():
        pytest.fail(f"{path} is missing: the tests need ../shared/data/paraphrasus beside the checkout.")
    rows = list(json.loads(path.read_text()).values())[offset : offset + n]
    return [r["sentence1"] for r in rows], [r["sentence2"] for r in rows], [r["label"] for r in rows]


@pytest.fixture(scope="session")
def tiny_judge() -> Judge:
    return make_tiny_judge()


@pytest.fixture(scope="session")
def embedded_judge() -> Judge:
    return Judge.load()
