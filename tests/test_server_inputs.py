"""Bad inputs and configuration on the judge server's paths (issue 55): a real uvicorn server on 127.0.0.1
(free port, background thread) and a tiny judge; references come from ``Judge.score`` or the local reward on
another judge instance, never from the server's own output."""

from __future__ import annotations

import asyncio

import httpx
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from pluie_reward import PluieReward  # noqa: E402
from pluie_reward.serving import background, create_app  # noqa: E402
from pluie_reward.serving.client import RemotePluieReward, compute_score, compute_score_batch  # noqa: E402
from pluie_reward.testing import make_tiny_judge  # noqa: E402

TOL = 1e-3
SOURCES = ["The cat sleeps on the mat.", "It rained all day in Paris.", "She bought three red apples."]
HYPOTHESES = ["A cat is asleep on the mat.", "Paris had rain the whole day.", "She purchased three apples."]
BAD = "A cat\ud800 sleeps."  # a lone surrogate: not UTF-8 text, cannot be sent as JSON


@pytest.fixture(scope="module")
def server():
    app = create_app(make_tiny_judge(), "para-fs", max_wait_ms=20, max_items_per_request=4)
    with background(app, host="127.0.0.1", port=0) as srv:
        srv.app = app
        yield srv


# item 5.4: a lone surrogate fails alone, as the local path fails -------------------------------
def test_a_lone_surrogate_fails_alone_in_gathered_verl_calls(server, tiny_judge):
    want = tiny_judge.score("para-fs", source=SOURCES, hypothesis=HYPOTHESES, use_cache=False)

    async def gathered():
        calls = [compute_score("d", h, s, url=server.url, max_wait_ms=200) for s, h in zip(SOURCES, HYPOTHESES)]
        calls.insert(1, compute_score("d", BAD, SOURCES[0], url=server.url, max_wait_ms=200))
        return await asyncio.gather(*calls, return_exceptions=True)

    got = asyncio.run(gathered())
    bad = got.pop(1)
    assert isinstance(bad, ValueError) and "field 'hypothesis': character 5 is a lone surrogate (\\ud800)" in str(bad)
    assert [g["logratio"] for g in got] == pytest.approx(want, abs=TOL)  # the others are scored


def test_remote_reward_refuses_a_lone_surrogate_as_the_local_reward_does(server, tiny_judge):
    completions, sources = [HYPOTHESES[0], HYPOTHESES[1], BAD], SOURCES[:2] + [SOURCES[0]]
    with pytest.raises(ValueError) as local:
        PluieReward(tiny_judge)(completions=completions, source=sources)
    remote = RemotePluieReward(server.url, chunk_size=2)  # the bad item is item 0 of the second chunk
    with pytest.raises(ValueError) as got:
        asyncio.run(remote(completions=completions, source=sources))
    assert str(got.value) == str(local.value) and "item 2" in str(got.value)
    with pytest.raises(ValueError, match="compute_score_batch: field 'hypothesis', item 1: character 5 is a lone surrogate"):
        compute_score_batch(["d", "d"], [HYPOTHESES[0], BAD], SOURCES[:2], url=server.url)


def test_openrlhf_remote_refuses_a_lone_surrogate_with_its_item(server, monkeypatch):
    from pluie_reward.serving import openrlhf

    monkeypatch.setenv("PLUIE_REWARD_URL", server.url)
    with pytest.raises(ValueError, match=r"field 'labels', item 0: character 5 is a lone surrogate \(\\ud800\)"):
        openrlhf.reward_func(["Q: hi\nA cat."], ["Q: hi\n"], [BAD])
