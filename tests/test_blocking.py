"""pluie_reward.integrations.blocking: Dynamic Blocking (Niu et al., 2021) as a transformers LogitsProcessor,
checked against decoding loops and masks written here."""

import math

import pytest
import torch
from transformers import LogitsProcessorList

from pluie_reward.integrations.blocking import DynamicBlocking, surface_forms
from pluie_reward.testing import make_tiny_causal_lm, make_tiny_tokenizer

STEPS = 12


@pytest.fixture(scope="module")
def tiny():
    tokenizer = make_tiny_tokenizer()
    model = make_tiny_causal_lm(tokenizer, seed=0).eval()
    prompt = tokenizer("Paraphrase: The cat sleeps on the mat.", return_tensors="pt").input_ids
    return tokenizer, model, prompt


def _generate(model, prompt, rows, processor=None, **kwargs):
    ids = prompt.repeat(rows, 1)  # the same prompt on every row: no padding, so every row is one plain sequence
    processors = LogitsProcessorList([processor]) if processor is not None else None
    settings = {"do_sample": False, "max_new_tokens": STEPS, "min_new_tokens": STEPS, **kwargs}
    return model.generate(ids, logits_processor=processors, **settings)[:, prompt.shape[1]:].tolist()


def _reference_greedy(model, prompt, source, eos_id):
    """Greedy decoding written out: a full forward per step; once a token is generated, every token that follows
    it somewhere in the source gets -inf (probability 1); eos is kept off as generate's min_new_tokens does."""
    sequence = prompt[0].tolist()
    out = []
    for _ in range(STEPS):
        with torch.no_grad():
            logits = model(torch.tensor([sequence])).logits[0, -1].clone()
        logits[eos_id] = -math.inf
        if out and source:
            for i in range(len(source) - 1):
                if source[i] == out[-1]:
                    logits[source[i + 1]] = -math.inf
        token = int(logits.argmax())
        out.append(token)
        sequence.append(token)
    return out


def _source_bigrams_emitted(generated, source):
    pairs = set(zip(source, source[1:]))
    return [(a, b) for a, b in zip(generated, generated[1:]) if (a, b) in pairs]


def test_probability_one_never_emits_the_source_token_after_the_one_just_emitted(tiny):
    """Sources: the model's own greedy answer (without blocking it copies all of it), none, and the prompt's
    sentence. With probability 1, generate's output equals the loop above token for token, emits no source bigram,
    and the row without a source is the unblocked answer."""
    tokenizer, model, prompt = tiny
    plain = _generate(model, prompt, 1)[0]
    sentence = tokenizer.encode("The cat sleeps on the mat.", add_special_tokens=False)
    sources = [plain, None, sentence]
    blocked = _generate(model, prompt, 3, DynamicBlocking(sources, probability=1.0))
    assert blocked[1] == plain
    assert blocked[0] != plain and _source_bigrams_emitted(plain, plain)  # the check below can fail
    for row, source in zip(blocked, sources):
        assert row == _reference_greedy(model, prompt, source, tokenizer.eos_token_id)
        assert not _source_bigrams_emitted(row, source or [])
    # sampled rows too (several answers per prompt: rows 2k and 2k+1 read source k)
    torch.manual_seed(0)
    sampled = _generate(model, prompt, 2, DynamicBlocking([plain, None], 1.0), do_sample=True, num_return_sequences=3, top_k=0)
    assert len(sampled) == 6 and all(not _source_bigrams_emitted(row, plain) for row in sampled[:3])


def test_rows_without_a_source_are_unchanged_and_only_generated_tokens_trigger():
    source = [5, 6, 7, 6, 9]
    blocking = DynamicBlocking([source, None, []], probability=1.0)
    scores = torch.randn(3, 12)
    prompt = torch.tensor([[5, 6], [5, 6], [5, 6]])  # the prompt ends with source tokens: they trigger nothing
    assert torch.equal(blocking(prompt, scores), scores)
    step = torch.cat([prompt, torch.tensor([[6], [6], [6]])], 1)  # every row has just emitted 6
    after = blocking(step, scores.clone())
    # by hand: 6 is followed by 7 and by 9 in the source
    assert [int(i) for i in torch.isinf(after[0]).nonzero()] == [7, 9]
    assert torch.equal(after[0, [0, 1, 2, 3, 4, 5, 6, 8, 10, 11]], scores[0, [0, 1, 2, 3, 4, 5, 6, 8, 10, 11]])
    assert torch.equal(after[1:], scores[1:])
    nxt = torch.cat([step, torch.tensor([[3], [3], [3]])], 1)  # 3 is not in the source
    assert torch.equal(blocking(nxt, scores), scores)


def _masks(seed, probability=0.5, rows=1):
    """Which ids each row blocks after emitting each source token (a 40-token source: 39 bigrams)."""
    source = list(range(100, 140))
    blocking = DynamicBlocking([source], probability, seed=seed)
    prompt = torch.zeros(rows, 3, dtype=torch.long)
    blocking(prompt, torch.zeros(rows, 200))
    masks = []
    for token in source:
        ids = torch.cat([prompt, torch.full((rows, 1), token)], 1)
        blocking._length = prompt.shape[1]  # the same step again for each token (the active entries stay drawn)
        masks.append(torch.isinf(blocking(ids, torch.zeros(rows, 200))).nonzero().tolist())
    return masks


def test_seeded_runs_repeat_and_the_probability_is_a_share_of_bigrams(tiny):
    assert _masks(7) == _masks(7)
    assert _masks(7) != _masks(8)
    blocked = sum(len(m) for m in _masks(7))
    assert 0 < blocked < 39  # some of the 39 bigrams are active, not all
    assert sum(len(m) for m in _masks(7, probability=1.0)) == 39 and sum(len(m) for m in _masks(7, probability=0.0)) == 0
    two = _masks(7, rows=2)  # two answers to one prompt draw their own entries
    assert [[r for r, _ in m if r == 0] for m in two] != [[0 for r, _ in m if r == 1] for m in two]
    # the same seed repeats a whole sampled generate call
    tokenizer, model, prompt = tiny
    runs = []
    for _ in range(2):
        torch.manual_seed(1)
        runs.append(_generate(model, prompt, 2, DynamicBlocking([prompt[0].tolist()] * 2, 0.5, seed=3), do_sample=True, top_k=0))
    assert runs[0] == runs[1]


def test_surface_forms_block_variants_of_the_next_token():
    tokenizer = make_tiny_tokenizer()
    blocking = DynamicBlocking.from_texts(tokenizer, ["the cat sleeps on the mat."], probability=1.0)
    the = tokenizer.encode(" the", add_special_tokens=False)
    mat = tokenizer.encode(" mat", add_special_tokens=False)
    assert len(the) == len(mat) == 1
    prompt = torch.tensor([[1, 2]])
    blocking(prompt, torch.zeros(1, len(tokenizer)))
    after = blocking(torch.tensor([[1, 2, the[0]]]), torch.zeros(1, len(tokenizer)))
    blocked = {tokenizer.decode([int(i)]) for i in torch.isinf(after[0]).nonzero()}
    # " the" is followed by " mat" in the source (and "the" by " cat": the first word has no space, another token)
    assert " mat" in blocked and " cat" not in blocked
    assert blocked == {tokenizer.decode([i]) for i in surface_forms(tokenizer, mat[0])}
    plain = DynamicBlocking.from_texts(tokenizer, ["the cat sleeps on the mat."], 1.0, surface=False)
    ids = tokenizer.encode("the cat sleeps on the mat.", add_special_tokens=False)
    assert plain.bigrams[0] == [(frozenset({a}), frozenset({b})) for a, b in zip(ids, ids[1:])]


def test_bad_input_says_what_to_do():
    with pytest.raises(ValueError, match="probability must be a number in"):
        DynamicBlocking([[1, 2]], probability=float("nan"))
    with pytest.raises(ValueError, match="one source's token ids"):
        DynamicBlocking([])
    with pytest.raises(ValueError, match="not one string"):
        DynamicBlocking.from_texts(make_tiny_tokenizer(), "The cat sleeps.")
    with pytest.raises(ValueError, match="3 rows for 2 sources"):
        DynamicBlocking([[1, 2], None])(torch.zeros(3, 2, dtype=torch.long), torch.zeros(3, 5))
