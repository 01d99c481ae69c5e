"""Shared fixtures: tiny random judges built locally, and the embedded SmolLM2 judge (loaded once).

Some tests read ``../shared`` beside the checkout (the seeds' texts, real tokenizers, the PARAPHRASUS
data), always through :func:`shared_path` (tests/shared_files.py): without the file they are skipped
with a reason naming it (``pytest -ra`` groups them, one line per missing path), and the header of
the run says so. ``PLUIE_SHARED=/path/to/shared`` points elsewhere.
"""

import json
import os

import pytest

from pluie_reward import Judge
from pluie_reward.testing import make_tiny_judge
from shared_files import SHARED, shared_path

def pytest_configure(config):
    config.addinivalue_line("markers", "slow: a slow test (the CI runs it too); deselect with -m 'not slow'")
    if os.environ.get("PYTEST_XDIST_WORKER"):  # `-n N` (pytest-xdist): N workers share the cores, one torch thread each
        import torch

        torch.set_num_threads(1)


def pytest_report_header(config):
    if not SHARED.is_dir():
        return f"note: {SHARED} is missing; the tests reading ../shared are skipped."
    return None


def shared_tokenizer(name: str):
    """A real tokenizer from ``../shared/tokenizers``, read from its folder only (never asked of the Hub).

    Args:
        name: the folder's name, e.g. ``"mistral-7b-instruct-v0.2"``.

    Returns:
        The tokenizer; the calling test is skipped when the folder is missing.
    """
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(shared_path(f"tokenizers/{name}"), local_files_only=True)


def mrpc_pairs(n: int, offset: int = 0) -> tuple[list[str], list[str], list[bool]]:
    """The first ``n`` MRPC pairs of the PARAPHRASUS files (sources, hypotheses, labels)."""
    rows = list(json.loads(shared_path("data/paraphrasus/ms-mrpc.json").read_text()).values())[offset : offset + n]
    return [r["sentence1"] for r in rows], [r["sentence2"] for r in rows], [r["label"] for r in rows]


def load_script(name: str):
    """The maintainer script ``scripts/<name>.py`` as a module (scripts/ is not installed nor a package), loaded once
    under the name ``scripts.<name>`` so that tests patch the module the script's functions read."""
    import importlib.util
    import sys
    from pathlib import Path

    key = f"scripts.{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, Path(__file__).resolve().parents[1] / "scripts" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return sys.modules[key]


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
    """The default judge (the embedded model, its adapter merged), loaded once for the session."""
    return Judge.load()


@pytest.fixture(scope="session")
def embedded_base_judge() -> Judge:
    """The untuned embedded model (``Judge.load("embedded-base")``), loaded once: for tests that only read it."""
    return Judge.load("embedded-base")


@pytest.fixture()
def local_openrlhf_judge(tmp_path, monkeypatch):
    """The tiny judge (seed 0) saved to disk and named by the environment that OpenRLHF's ``reward_func``
    reads when it loads the judge in the worker (no ``PLUIE_REWARD_URL``): returns its tokenizer."""
    from pluie_reward.testing import make_tiny_causal_lm, make_tiny_tokenizer

    tokenizer = make_tiny_tokenizer()
    make_tiny_causal_lm(tokenizer, seed=0).save_pretrained(tmp_path / "judge")
    tokenizer.save_pretrained(tmp_path / "judge")
    monkeypatch.delenv("PLUIE_REWARD_URL", raising=False)
    monkeypatch.setenv("PLUIE_REWARD_MODEL", str(tmp_path / "judge"))
    monkeypatch.setenv("PLUIE_REWARD_DEVICE", "cpu")
    return tokenizer
