"""One completion -> text function and one field -> column mapping for every integration
(pluie_reward.integrations.fields): local and remote rewards, verl, the server, datasets and the CLI read the
same text and report a missing column the same way."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pluie_reward.integrations.fields import (
    FieldMap,
    MissingColumnError,
    completion_text,
    map_fields,
    parse_assignments,
    prompt_text,
)

# a tool-calling completion: an assistant turn, a tool result, the final assistant answer
MULTI = [
    {"role": "assistant", "content": "Hello."},
    {"role": "tool", "content": "42"},
    {"role": "assistant", "content": "World."},
]
# a multi-turn prompt: the request being answered is the last user message
MULTI_TURN = [
    {"role": "system", "content": "You paraphrase."},
    {"role": "user", "content": "The dog barks at night."},
    {"role": "assistant", "content": "At night, the dog barks."},
    {"role": "user", "content": "The cat sleeps on the mat."},
]


def test_completion_text_reads_the_last_assistant_answer():
    assert completion_text("A cat.") == "A cat."
    assert completion_text(MULTI) == "World."
    assert completion_text({"role": "assistant", "content": "One."}) == "One."
    # a final turn holding only tool calls has no text: the last assistant text is the answer
    assert completion_text([{"role": "assistant", "content": "Done."}, {"role": "assistant", "content": None, "tool_calls": [{}]}]) == "Done."
    assert completion_text([{"role": "assistant", "content": [{"type": "text", "text": "Hi"}, {"type": "image"}, {"type": "text", "text": "!"}]}]) == "Hi!"
    assert completion_text([{"role": "tool", "content": "42"}]) == ""
    with pytest.raises(TypeError, match="completion 3 is None"):
        completion_text(None, 3)
    with pytest.raises(TypeError, match="completion 1: expected a string or a list of chat messages, got int"):
        completion_text(7, 1)


def test_prompt_text_reads_the_last_user_message():
    assert prompt_text(MULTI_TURN) == "The cat sleeps on the mat."
    assert prompt_text([{"role": "system", "content": "S"}]) == "S"  # no user turn: the last message
    with pytest.raises(TypeError, match="prompt 2"):
        prompt_text(3, 2)


def test_local_and_remote_rewards_read_the_same_text(tiny_judge):
    from pluie_reward import NoveltyReward, PluieReward
    from pluie_reward.serving.client import RemotePluieReward, _verl_fields

    # the remote reward's request body (no server needed to build it)
    remote = RemotePluieReward("http://127.0.0.1:1", fields={"source": "prompt"})
    body = remote.payload([MULTI], {}, prompts=[MULTI_TURN])
    assert body == {"hypothesis": ["World."], "source": ["The cat sleeps on the mat."]}
    assert _verl_fields(["d"], [MULTI], ["The cat sleeps."], None, None)["hypothesis"] == ["World."]
    # the local reward scores the same texts: compare with Judge.score on them, written out here
    local = PluieReward(tiny_judge, fields={"source": "prompt"})
    got = local(prompts=[MULTI_TURN], completions=[MULTI])
    want = tiny_judge.score("para-fs", source=["The cat sleeps on the mat."], hypothesis=["World."], use_cache=False)
    assert got == pytest.approx(want, abs=1e-4)
    other = tiny_judge.score("para-fs", source=["The dog barks at night."], hypothesis=["World."], use_cache=False)
    assert abs(want[0] - other[0]) > 1e-3  # the first user message would give another score
    # novelty against the prompt's last user message: [the cat sleeps on the mat] -> [the cat sleeps] drops 3 of 6
    # words (the first user message, [the dog barks at night], would give 4 of 5); the message itself -> 0.0
    got = NoveltyReward("prompt")(prompts=[MULTI_TURN] * 2, completions=["The cat sleeps.", "The cat sleeps on the mat."])
    assert got == pytest.approx([0.5, 0.0])


def test_a_string_where_the_list_of_completions_goes_is_refused_locally_and_remotely(tiny_judge):
    """``completions="abc"`` with three sources would be three one-character completions: a TypeError that says
    what to pass, from the local reward, the remote reward's request and the async local reward alike."""
    import asyncio

    from pluie_reward import AsyncPluieReward, PluieReward
    from pluie_reward.serving.client import RemotePluieReward, compute_score_batch

    calls = {
        "local": lambda bad: PluieReward(tiny_judge)(prompts=["p"] * 3, completions=bad, source=["s"] * 3),
        "remote": lambda bad: RemotePluieReward("http://127.0.0.1:1").payload(bad, {"source": ["s"] * 3}, prompts=["p"] * 3),
        "async": lambda bad: asyncio.run(AsyncPluieReward(tiny_judge)(prompts=["p"] * 3, completions=bad, source=["s"] * 3)),
        # verl's batch function checks its arguments before any request (nothing listens on port 1)
        "verl": lambda bad: compute_score_batch(["d"] * 3, bad, ["s"] * 3, url="http://127.0.0.1:1"),
    }
    for where, call in calls.items():
        for bad, kind in (("abc", "str"), (b"abc", "bytes"), ({"role": "assistant", "content": "abc"}, "dict"), (3, "int")):
            with pytest.raises(TypeError, match=rf"completions must be a list with one completion per sample, got a {kind} "
                                                r"\(.*\); for one completion pass completions=\["):
                call(bad)
    assert len(calls["local"](["abc", "def", "ghi"])) == 3  # the list itself is fine


def test_missing_column_is_the_same_error_everywhere(tiny_judge):
    from datasets import Dataset

    from pluie_reward import PluieReward
    from pluie_reward.serving.client import RemotePluieReward
    from pluie_reward.integrations.data import score_dataset

    errors = []
    with pytest.raises(KeyError) as local:
        PluieReward(tiny_judge, fields={"source": "s1"})(prompts=["p"], completions=["x"], src=["y"], trainer_state=None, completion_ids=[[1]], environments=None)
    errors.append(str(local.value))
    with pytest.raises(KeyError) as remote:
        RemotePluieReward("http://127.0.0.1:1", fields={"source": "s1"}).payload(["x"], {"src": ["y"], "trainer_state": None, "completion_ids": [[1]], "environments": None, "log_extra": print}, prompts=["p"])
    errors.append(str(remote.value))
    for message in errors:  # TRL's own keyword arguments are not listed as dataset columns
        assert "reads the column 's1', which is not in the batch. Available columns: ['src', 'prompt']. Pass fields={'source': '<column>'}" in message
    with pytest.raises(KeyError, match="reads the column 's1', which is not in the dataset"):
        score_dataset(Dataset.from_dict({"src": ["a"], "hypothesis": ["b"]}), tiny_judge, columns={"source": "s1"})


def test_map_fields_rules():
    fm = map_fields(["original", "instruction", "hypothesis"], {"original": "p1"}, optional=["gold"], fixed={"hypothesis"}, template="rev")
    assert fm.columns == {"original": "p1", "instruction": "instruction", "gold": "gold"}
    # optional fields are read when present, never required unless mapped explicitly
    assert fm.select(["p1", "instruction"]) == {"original": "p1", "instruction": "instruction"}
    assert fm.select(["p1", "instruction", "gold"])["gold"] == "gold"
    explicit = map_fields(["original"], {"gold": "ref"}, optional=["gold"])
    with pytest.raises(MissingColumnError, match="'ref'"):
        explicit.select(["original"])
    with pytest.raises(ValueError, match=r"--column: 'src' is not a field of template 'para-fs'"):
        map_fields(["source", "hypothesis"], {"src": "x"}, template="para-fs", setting="--column")
    with pytest.raises(ValueError, match="filled by the integration itself"):
        map_fields(["source", "hypothesis"], {"hypothesis": "x"}, fixed={"hypothesis"})
    with pytest.raises(MissingColumnError, match=r"Pass --column source=<column>"):
        map_fields(["source"], setting="--column").select(["s"], where="the input file")
    with pytest.raises(ValueError, match="has 1 values for 2 completions"):
        FieldMap.explicit({"source": "s"}).gather({"s": ["a"]}, 2)
    assert parse_assignments(["a=b", "c = d", "e="]) == {"a": "b", "c": "d", "e": ""}
    assert map_fields(["original"], {"gold": ""}, optional=["gold"]).select(["original", "gold"]) == {"original": "original"}
    with pytest.raises(ValueError, match=r"\['original'\] must name a column: only optional fields"):
        map_fields(["original"], {"original": ""}, optional=["gold"])
    with pytest.raises(ValueError, match="--rm-field expects FIELD=COLUMN"):
        parse_assignments(["nope"], "--rm-field")


def test_the_http_client_imports_without_torch():
    """The client and integrations/fields need httpx only: torch and transformers are blocked in a fresh process."""
    code = (
        "import sys; sys.modules['torch'] = None; sys.modules['transformers'] = None; sys.modules['yaml'] = None\n"
        "import pluie_reward.serving.client as c, pluie_reward.serving.openrlhf as o\n"
        "print(c.completion_texts([[{'role': 'assistant', 'content': 'ok'}]], 'x')[0])"
    )
    root = str(Path(__file__).resolve().parents[1])
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
