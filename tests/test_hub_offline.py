"""A model name the Hub cannot provide fails within seconds, without the Hub's minute of retries, and says what to do
(``hf download``, ``HF_HUB_OFFLINE=1``); a model in the Hugging Face cache loads without network. The network is
cut by replacing ``socket.getaddrinfo`` (every connection resolves its host through it), which also counts the
attempts: the check must make at most one, where transformers alone makes six (five retries)."""

from __future__ import annotations

import socket

import pytest

from pluie_reward.engines.transformers import loading
from pluie_reward.common.errors import ModelNotFoundError
from pluie_reward.engines.transformers.loading import load_model_and_tokenizer


@pytest.fixture
def no_network(monkeypatch, tmp_path):
    """No network (every host lookup fails, and is counted), an empty Hugging Face cache, offline mode off."""
    from huggingface_hub import constants

    attempts = []

    def getaddrinfo(host, *args, **kwargs):
        attempts.append(host)
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # tests/shared_files.py turns it on for the session
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    return attempts


def test_a_missing_model_without_network_fails_at_once_naming_hf_download_and_offline_mode(no_network):
    with pytest.raises(ModelNotFoundError) as caught:
        load_model_and_tokenizer("some-org/no-such-model", default_adapter=None)
    message = str(caught.value)
    assert "`hf download some-org/no-such-model`" in message and "HF_HUB_OFFLINE=1" in message
    assert "huggingface-cli" not in message and "cannot be reached" in message
    assert isinstance(caught.value, FileNotFoundError)  # an OSError, as transformers' own "not found"
    assert 1 <= len(no_network) <= 1, no_network  # one probe of the Hub, no retries


def test_offline_mode_asks_the_hub_nothing(no_network, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    with pytest.raises(ModelNotFoundError, match=r"with HF_HUB_OFFLINE=1 the Hub is not asked.*`hf download some-org/x`"):
        load_model_and_tokenizer("some-org/x", default_adapter=None)
    assert no_network == []


def test_a_path_that_does_not_exist_is_not_sent_to_the_hub(no_network, tmp_path):
    for name in (str(tmp_path / "missing"), "./missing-folder", "a/b/c"):
        with pytest.raises(ModelNotFoundError, match="no such file or folder"):
            load_model_and_tokenizer(name, default_adapter=None)
    assert no_network == []


def cache_a_tiny_model(hub: "str", repo_id: str):
    """A tiny model and tokenizer saved as the Hugging Face cache stores a download of ``repo_id`` (refs/main
    naming a snapshot folder); returns the model."""
    from pathlib import Path

    from pluie_reward.testing import make_tiny_causal_lm, make_tiny_tokenizer

    tokenizer = make_tiny_tokenizer()
    model = make_tiny_causal_lm(tokenizer)
    repo = Path(hub) / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / ("0" * 40)
    model.save_pretrained(snapshot)
    tokenizer.save_pretrained(snapshot)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0" * 40)
    return model


@pytest.mark.parametrize("offline", [False, True])
def test_a_cached_model_loads_without_network(no_network, monkeypatch, offline):
    import torch
    from huggingface_hub import constants

    if offline:
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    original = cache_a_tiny_model(constants.HF_HUB_CACHE, "some-org/tiny")
    model, tokenizer = load_model_and_tokenizer("some-org/tiny", device="cpu", default_adapter=None)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), original.state_dict().values()))
    assert len(no_network) <= (0 if offline else 1), no_network


def test_the_cli_says_it_in_one_line(no_network, capsys):
    from pluie_reward.tools import cli

    assert cli.main(["score", "--model", "some-org/no-such-model", "The cat sleeps.", "A cat sleeps."]) == 2
    err = capsys.readouterr().err.strip().splitlines()  # "loading some-org/no-such-model...", then the error
    assert len(err) == 2 and "hf download some-org/no-such-model" in err[1] and "HF_HUB_OFFLINE=1" in err[1], err
    assert err[1].startswith("pluie-reward score: error: --model some-org/no-such-model: ") and "Traceback" not in err[1]
    assert len(no_network) <= 1, no_network


def test_the_hub_answering_leaves_the_name_to_transformers(monkeypatch):
    """When the Hub answers (whatever it says), the name goes on to ``from_pretrained`` unchanged: transformers
    explains a missing or gated repository itself, and downloads updates."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    monkeypatch.setattr(loading, "hub_unreachable", lambda repo_id: None)
    assert loading.model_source("some-org/model", default_adapter=None) == "some-org/model"
