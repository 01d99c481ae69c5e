"""The copy-proof rewards on every path: the judge server (``/score`` with ``task``, ``/get_reward`` with
``--rm-reward paraphrase``), ``RemotePluieReward(task=...)``, verl's ``compute_score`` family and
OpenRLHF's ``reward_func`` (forwarding, and in process) give a verbatim copy, a disguised copy, an
honest paraphrase and a fragment the values of the local ``ParaphraseReward``.

The reference is written here: the judge's p_yes (``sigmoid`` of ``Judge.score`` on a judge the server
does not use) times the factors worked out by hand below; the local ``ParaphraseReward`` is checked
against it too. The server runs a separate tiny judge with the same weights.
"""

from __future__ import annotations

import asyncio
import math

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")

from pluie_reward import ParaphraseReward, PluieReward  # noqa: E402
from pluie_reward.core.template import load_template  # noqa: E402
from pluie_reward.serving import background, create_app  # noqa: E402
from pluie_reward.serving.client import (  # noqa: E402
    RemoteJudgeError, RemotePluieReward, compute_score, compute_score_batch, compute_score_sync,
)
from pluie_reward.serving.mapping import RewardMapping  # noqa: E402
from pluie_reward.testing import make_tiny_judge  # noqa: E402
from pluie_reward.tools.cli import main  # noqa: E402

TOKEN = "copy-proof-token-5"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
EXACT = 1e-5
SOURCE = "The cat sleeps on the mat."
COMPLETIONS = [
    SOURCE,                          # a verbatim copy: 0
    "THE CAT SLEEPS ON THE MAT!",    # a disguised copy (case, punctuation): 0
    "A cat is asleep on the mat.",   # honest: the -> a, sleeps -> is, + asleep: 3 edits / 7 words = 0.43 >= 0.3
    "The cat sleeps.",               # a fragment: 3 of 6 words deleted (0.5 >= 0.3), but 3 words of 6
]
# min(1, novelty / 0.3) x (1 - excess repetition) x min(1, (words / 6) / 0.67): the paraphrase has 7 words
FACTORS = [0.0, 0.0, 1.0, (3 / 6) / 0.67]
NOVELTY = [0.0, 0.0, 3 / 7, 0.5]
# the same completions as a policy may pad them at no cost (a trailing newline, spaces, blank lines, doubled spaces)
PADDED = [
    SOURCE + "\n",
    "  THE CAT SLEEPS ON THE MAT! ",
    "\n\nA cat is  asleep\ton the mat.\n\n",
    "The cat sleeps.\r\n",
]


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


@pytest.fixture(scope="module")
def want(tiny_judge) -> list[float]:
    logratios = tiny_judge.score("para-fs", source=[SOURCE] * len(COMPLETIONS), hypothesis=COMPLETIONS, use_cache=False)
    assert all(sigmoid(x) > 0.5 for x in logratios)  # the judge accepts the copies: a path paying their p_yes would show
    return [sigmoid(x) * f for x, f in zip(logratios, FACTORS)]


@pytest.fixture(scope="module")
def server():
    mapping = RewardMapping.for_template(load_template("para-fs"), reward="paraphrase")  # serve --rm-reward paraphrase
    app = create_app(make_tiny_judge(), "para-fs", token=TOKEN, mapping=mapping, max_wait_ms=20)
    with background(app, host="127.0.0.1", port=0) as srv:
        yield srv


def openrlhf_sample(response: str) -> tuple[str, str]:
    """OpenRLHF's query (prompt + response, special tokens kept) and prompt for one ChatML sample."""
    prompt = f"<|im_start|>user\nParaphrase: {SOURCE}<|im_end|>\n<|im_start|>assistant\n"
    return prompt + response + "<|im_end|>", prompt


def test_local_paraphrase_reward_is_the_hand_computation(tiny_judge, want):
    assert ParaphraseReward(tiny_judge)(completions=COMPLETIONS, source=[SOURCE] * 4) == pytest.approx(want, abs=EXACT)


def test_remote_reward_is_the_local_one_with_its_name_and_metrics(server, tiny_judge, want):
    local_metrics, remote_metrics, local_extra, remote_extra = {}, {}, {}, {}
    local = ParaphraseReward(tiny_judge)
    remote = RemotePluieReward(server.url, task="paraphrase", token=TOKEN)
    columns = {"source": [SOURCE] * 4, "topic": ["pets"] * 4}
    local(prompts=["p"] * 4, completions=COMPLETIONS, log_metric=local_metrics.__setitem__, log_extra=local_extra.__setitem__,
          **columns)
    got = asyncio.run(remote(prompts=["p"] * 4, completions=COMPLETIONS, log_metric=remote_metrics.__setitem__,
                             log_extra=remote_extra.__setitem__, **columns))
    assert got == pytest.approx(want, abs=EXACT)
    assert remote.__name__ == local.__name__ == "paraphrase"  # TRL logs rewards/paraphrase/mean either way
    assert RemotePluieReward(server.url).__name__ == PluieReward(tiny_judge).__name__ == "pluie"
    # copies 2 of 4, the fragment is short, novelty 0, 0, 3/7, 0.5
    assert remote_metrics == pytest.approx(local_metrics, abs=EXACT)
    assert remote_metrics["paraphrase/copy_rate"] == 0.5 and remote_metrics["paraphrase/short_rate"] == 0.25
    assert remote_metrics["paraphrase/novelty"] == pytest.approx((3 / 7 + 0.5) / 4)
    assert remote_extra["paraphrase/novelty"] == local_extra["paraphrase/novelty"] == [0.0, 0.0, round(3 / 7, 4), 0.5]


def test_score_endpoint_adds_the_task_reward(server, want):
    body = {"source": SOURCE, "hypothesis": COMPLETIONS, "task": "paraphrase"}  # one source string for all items
    got = httpx.post(server.url + "/score", json=body, headers=AUTH, timeout=60).json()
    assert got["reward"] == pytest.approx(want, abs=EXACT)
    assert got["novelty"] == pytest.approx(NOVELTY)
    assert set(httpx.post(server.url + "/score", json={"source": SOURCE, "hypothesis": COMPLETIONS}, headers=AUTH,
                          timeout=60).json()) == {"logratio", "p_yes", "verdict"}  # no task, no reward column


def test_verl_compute_score_family(server, want):
    n = len(COMPLETIONS)
    batch = compute_score_batch(["d"] * n, COMPLETIONS, [SOURCE] * n, url=server.url, token=TOKEN, output="paraphrase")
    assert batch == pytest.approx(want, abs=EXACT)

    async def all_items():
        return await asyncio.gather(*(compute_score("d", c, SOURCE, url=server.url, token=TOKEN, output="paraphrase")
                                      for c in COMPLETIONS))

    results = asyncio.run(all_items())
    assert [r["score"] for r in results] == pytest.approx(want, abs=EXACT)
    assert [r["novelty"] for r in results] == pytest.approx(NOVELTY)
    assert all(set(r) == {"score", "acc", "logratio", "p_yes", "novelty"} for r in results)  # verl reads the first's keys
    synced = [compute_score_sync("d", c, SOURCE, url=server.url, token=TOKEN, output="paraphrase") for c in COMPLETIONS]
    assert [r["score"] for r in synced] == pytest.approx(want, abs=EXACT)


def test_openrlhf_get_reward_and_reward_func(server, want, monkeypatch):
    import pluie_reward.serving.openrlhf as openrlhf

    samples = [openrlhf_sample(c) for c in COMPLETIONS]
    queries, prompts = [q for q, _ in samples], [p for _, p in samples]
    answer = httpx.post(server.url + "/get_reward", json={"query": queries, "prompts": prompts, "labels": [SOURCE] * 4},
                        headers=AUTH, timeout=60).json()
    assert answer["rewards"] == pytest.approx(want, abs=EXACT)
    assert answer["scores"] == answer["rewards"]  # OpenRLHF's dynamic filtering reads what is trained on
    assert answer["extra_logs"]["pluie_novelty"] == pytest.approx(NOVELTY)
    monkeypatch.setenv("PLUIE_REWARD_URL", server.url)
    monkeypatch.setenv("PLUIE_REWARD_TOKEN", TOKEN)
    got = [openrlhf.reward_func([q], [p], [SOURCE])["rewards"][0] for q, p in samples]  # one sample per call, as OpenRLHF
    assert got == pytest.approx(want, abs=EXACT)


def test_openrlhf_reward_func_in_process(want, local_openrlhf_judge, monkeypatch):
    """No URL: the worker loads the judge (the tiny model saved to disk) with PLUIE_REWARD_RM_REWARD."""
    import importlib

    import pluie_reward.serving.openrlhf as openrlhf

    monkeypatch.setenv("PLUIE_REWARD_RM_REWARD", "paraphrase")
    module = importlib.reload(openrlhf)  # a fresh worker: the judge is loaded on the first call
    try:
        samples = [openrlhf_sample(c) for c in COMPLETIONS]
        answer = module.reward_func([q for q, _ in samples], [p for _, p in samples], [SOURCE] * 4)
        assert answer["rewards"] == pytest.approx(want, abs=EXACT)
    finally:
        module._state.get("batcher") and module._state["batcher"].close()
        module._state.clear()


def test_bad_task_requests_say_what_to_do(server, capsys):
    def score(task: str) -> httpx.Response:
        return httpx.post(server.url + "/score", json={"source": SOURCE, "hypothesis": ["x"], "task": task}, headers=AUTH,
                          timeout=60)

    bad = score("summary")
    assert bad.status_code == 422 and "'task' must be one of ['paraphrase', 'translation', 'revision']" in bad.text
    wrong = score("revision")
    assert wrong.status_code == 422 and "has no field 'original'" in wrong.text and "'rev'" in wrong.text
    with pytest.raises(ValueError, match="output='prob' does not apply: leave output= out"):
        RemotePluieReward(server.url, task="paraphrase", output="prob")
    with pytest.raises(ValueError, match="template field 'original'.*fields=\\{'original': '<column>'\\}"):
        RemotePluieReward(server.url, task="revision", fields={"source": "paragraph"})
    with pytest.raises(ValueError, match="unknown task 'summary'"):
        RemotePluieReward(server.url, task="summary")
    with pytest.raises(ValueError, match=r"or a task's copy-proof reward \['paraphrase'"):
        compute_score_batch(["d"], ["x"], [SOURCE], url=server.url, token=TOKEN, output="summary")
    with pytest.raises(RemoteJudgeError, match="original"):  # revision reads 'original', which para-fs has not
        compute_score_batch(["d"], ["x"], [SOURCE], url=server.url, token=TOKEN, output="revision")
    with pytest.raises(ValueError, match="does not answer Yes/No"):
        RewardMapping.for_template(load_template("net-likert"), reward="paraphrase")
    assert main(["serve", "-t", "net-likert", "--rm-reward", "paraphrase"]) == 2
    assert "--rm-reward paraphrase: template 'net-likert' does not answer Yes/No" in capsys.readouterr().err


def test_padded_completions_get_the_clean_ones_reward_on_every_path(server, tiny_judge, want, local_openrlhf_judge,
                                                                     monkeypatch):
    """Layout around or inside a completion moves no path's reward: each gives the padded completions the value
    the hand computation gives the clean ones (red on every whitespace-keeping path without the judge's clean_text)."""
    import importlib

    import pluie_reward.serving.openrlhf as openrlhf

    n = len(PADDED)
    assert ParaphraseReward(tiny_judge)(completions=PADDED, source=[SOURCE + "\n"] * n) == pytest.approx(want, abs=EXACT)
    remote = RemotePluieReward(server.url, task="paraphrase", token=TOKEN)
    assert asyncio.run(remote(completions=PADDED, source=[SOURCE] * n)) == pytest.approx(want, abs=EXACT)
    body = {"source": " " + SOURCE, "hypothesis": PADDED, "task": "paraphrase"}
    assert httpx.post(server.url + "/score", json=body, headers=AUTH, timeout=60).json()["reward"] == pytest.approx(want, abs=EXACT)
    assert compute_score_batch(["d"] * n, PADDED, [SOURCE] * n, url=server.url, token=TOKEN,
                               output="paraphrase") == pytest.approx(want, abs=EXACT)
    samples = [openrlhf_sample(c) for c in PADDED]
    answer = httpx.post(server.url + "/get_reward", json={"query": [q for q, _ in samples], "prompts": [p for _, p in samples],
                                                           "labels": [SOURCE] * n}, headers=AUTH, timeout=60).json()
    assert answer["rewards"] == pytest.approx(want, abs=EXACT)
    monkeypatch.setenv("PLUIE_REWARD_RM_REWARD", "paraphrase")
    module = importlib.reload(openrlhf)  # in process, as a worker without a URL
    try:
        got = module.reward_func([q for q, _ in samples], [p for _, p in samples], [SOURCE] * n)["rewards"]
        assert got == pytest.approx(want, abs=EXACT)
    finally:
        module._state.get("batcher") and module._state["batcher"].close()
        module._state.clear()
    # the judge itself: the padded and the clean texts are one prompt; clean_text=False reads them as given
    assert tiny_judge.score("para-fs", source=SOURCE, hypothesis=PADDED, use_cache=False) == pytest.approx(
        tiny_judge.score("para-fs", source=SOURCE, hypothesis=COMPLETIONS, use_cache=False), abs=EXACT)
    tiny_judge.clean_text = False
    try:
        raw = tiny_judge.score("para-fs", source=SOURCE, hypothesis=PADDED, use_cache=False)
    finally:
        tiny_judge.clean_text = True
    clean = tiny_judge.score("para-fs", source=SOURCE, hypothesis=COMPLETIONS, use_cache=False)
    assert all(abs(a - b) > 1e-4 for a, b in zip(raw, clean))


HONEST = "A cat is asleep on the mat."
# issue 62's edits: disguised copies of SOURCE (all worth 0) and presentation around the honest answer (all read as it)
DISGUISED = [
    "The_cat sleeps on_the mat.",                 # words joined by underscores
    "Tʜᴇ cat sleeps on the mᴀt.",                  # Latin small capitals
    "The cat sleeps օn the mat.",                 # an Armenian look-alike (oh)
    "The cat sleeps on the maտ.",                 # an Armenian letter with no Latin look-alike: a word mixing scripts
]
PRESENTED = [
    "Paraphrase: " + HONEST,
    "Sure! Here is a paraphrase: " + HONEST,
    "**" + HONEST + "**",
    HONEST[:-1],
    '"' + HONEST + '"',
    "A cat is asleep\non the mat.",                # an inner line break (the source is one line)
]
TWICE = HONEST + " " + HONEST  # 14 words, 12 trigrams: the second copy's 5 repeat the first's


def test_no_disguise_or_presentation_edit_raises_the_reward_on_any_path(server, tiny_judge, local_openrlhf_judge, monkeypatch):
    """Every path gives the disguised copies 0 and the presented answers the bare answer's reward (the judge reads the
    bare answer; the reference reads it literally here), the answer said twice its reward times 1 - 5/12."""
    import importlib

    import pluie_reward.serving.openrlhf as openrlhf

    completions = DISGUISED + PRESENTED + [TWICE]
    n = len(completions)
    bare = sigmoid(tiny_judge.score("para-fs", source=SOURCE, hypothesis=[HONEST], use_cache=False)[0])  # novelty 3/7
    want = [0.0] * len(DISGUISED) + [bare] * len(PRESENTED) + [bare * (1 - 5 / 12)]
    sources = [SOURCE] * n
    assert ParaphraseReward(tiny_judge)(completions=completions, source=sources) == pytest.approx(want, abs=EXACT)
    remote = RemotePluieReward(server.url, task="paraphrase", token=TOKEN)
    assert asyncio.run(remote(completions=completions, source=sources)) == pytest.approx(want, abs=EXACT)
    body = {"source": SOURCE, "hypothesis": completions, "task": "paraphrase"}
    assert httpx.post(server.url + "/score", json=body, headers=AUTH, timeout=60).json()["reward"] == pytest.approx(want, abs=EXACT)
    assert compute_score_batch(["d"] * n, completions, sources, url=server.url, token=TOKEN,
                               output="paraphrase") == pytest.approx(want, abs=EXACT)
    got = [compute_score_sync("d", c, SOURCE, url=server.url, token=TOKEN, output="paraphrase")["score"] for c in completions]
    assert got == pytest.approx(want, abs=EXACT)
    samples = [openrlhf_sample(c) for c in completions]
    answer = httpx.post(server.url + "/get_reward", json={"query": [q for q, _ in samples], "prompts": [p for _, p in samples],
                                                           "labels": sources}, headers=AUTH, timeout=60).json()
    assert answer["rewards"] == pytest.approx(want, abs=EXACT)
    monkeypatch.setenv("PLUIE_REWARD_RM_REWARD", "paraphrase")
    module = importlib.reload(openrlhf)  # in process, as a worker without a URL
    try:
        assert module.reward_func([q for q, _ in samples], [p for _, p in samples], sources)["rewards"] == pytest.approx(
            want, abs=EXACT)
    finally:
        module._state.get("batcher") and module._state["batcher"].close()
        module._state.clear()
    # a judge told to read texts as given (clean_text=False) reads the label: its reward differs from the bare answer's
    tiny_judge.clean_text = False
    try:
        raw = ParaphraseReward(tiny_judge)(completions=PRESENTED[:1], source=[SOURCE])
    finally:
        tiny_judge.clean_text = True
    assert abs(raw[0] - bare) > 1e-4
