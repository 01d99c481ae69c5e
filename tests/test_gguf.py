"""Bring your own judge as one line: ``Judge.load("<file>.gguf")``, on a tiny GGUF written here (the
embedded model's tokenizer cut to its first tokens, and its chat template; a 2-layer random llama),
against an independent eq. 3 on the model transformers reads from the same file."""

from __future__ import annotations

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from pluie_reward import Judge, load_template  # noqa: E402
from pluie_reward.engines.transformers.loading import embedded_gguf_path  # noqa: E402

from test_chat_templates import eq3  # noqa: E402

HIDDEN, FFN, HEADS, KV_HEADS, LAYERS = 64, 128, 4, 2, 2
# The first tokens of the embedded vocabulary (its 17 special tokens, the 256 bytes, then merges in rank
# order) and the templates' answers: a BPE tokenizer of its own, which every GGUF read here parses in a
# blink (the whole vocabulary, 49k tokens and merges, takes seconds per read in gguf's reader, and
# transformers reads the file 3 times per load).
VOCAB, ANSWERS = 2048, ("Yes", "No")


def write_tiny_gguf(path, seed: int = 0) -> None:
    """A llama GGUF with the embedded model's tokenizer fields (its first ``VOCAB`` tokens and the
    ``ANSWERS``, renumbered in that order, and the merges among them) and random float32 weights."""
    source = gguf.GGUFReader(embedded_gguf_path())
    writer = gguf.GGUFWriter(str(path), "llama")
    fields = source.fields
    every = fields["tokenizer.ggml.tokens"].contents()
    ids = list(range(VOCAB)) + sorted(every.index(answer) for answer in ANSWERS)
    tokens, types = [every[i] for i in ids], fields["tokenizer.ggml.token_type"].contents()
    kept = set(tokens)
    merges = [m for m in fields["tokenizer.ggml.merges"].contents()
              if len(parts := m.split(" ")) == 2 and parts[0] in kept and parts[1] in kept and parts[0] + parts[1] in kept]
    vocab = len(tokens)
    writer.add_name("tiny-test-llama")
    writer.add_context_length(2048)
    writer.add_embedding_length(HIDDEN)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_dimension_count(HIDDEN // HEADS)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(10000.0)
    writer.add_vocab_size(vocab)
    writer.add_tokenizer_model(fields["tokenizer.ggml.model"].contents())
    writer.add_tokenizer_pre(fields["tokenizer.ggml.pre"].contents())
    writer.add_token_list(tokens)
    writer.add_token_types([types[i] for i in ids])
    writer.add_token_merges(merges)
    for key, add in (("bos", writer.add_bos_token_id), ("eos", writer.add_eos_token_id),
                     ("unknown", writer.add_unk_token_id), ("padding", writer.add_pad_token_id)):
        add(fields[f"tokenizer.ggml.{key}_token_id"].contents())
    writer.add_add_bos_token(False)
    writer.add_chat_template(fields["tokenizer.chat_template"].contents())
    rng = np.random.default_rng(seed)

    def tensor(name: str, *shape: int, scale: float = 0.2) -> None:
        writer.add_tensor(name, (rng.standard_normal(shape) * scale).astype(np.float32))

    head = HIDDEN // HEADS
    tensor("token_embd.weight", vocab, HIDDEN)
    writer.add_tensor("output_norm.weight", np.ones(HIDDEN, dtype=np.float32))
    for i in range(LAYERS):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(HIDDEN, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(HIDDEN, dtype=np.float32))
        tensor(f"blk.{i}.attn_q.weight", HEADS * head, HIDDEN)
        tensor(f"blk.{i}.attn_k.weight", KV_HEADS * head, HIDDEN)
        tensor(f"blk.{i}.attn_v.weight", KV_HEADS * head, HIDDEN)
        tensor(f"blk.{i}.attn_output.weight", HIDDEN, HEADS * head)
        tensor(f"blk.{i}.ffn_gate.weight", FFN, HIDDEN)
        tensor(f"blk.{i}.ffn_up.weight", FFN, HIDDEN)
        tensor(f"blk.{i}.ffn_down.weight", HIDDEN, FFN)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_a_gguf_file_is_a_judge_in_one_line(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("PLUIE_REWARD_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path)
    capfd.readouterr()
    judge = Judge.load(str(path))  # the one line: converted once, cached, scored like any model
    said = capfd.readouterr().err
    # the conversion says what it does in one line of its own, then how far it is (transformers' de-quantization bar);
    # its other bars (writing shards, loading weights) are not shown
    lines = said.replace("\r", "\n").splitlines()
    assert lines[0] == f"pluie-reward: converting tiny.gguf to a transformers model (once) into {tmp_path}/cache/tiny-{path.stat().st_size}"
    assert all(line.startswith("Converting and de-quantizing GGUF tensors") for line in lines[1:] if line.strip()), said
    assert any("100%" in line for line in lines[1:]), said
    assert judge.name == str(path)
    pairs = {"source": ["The cat sleeps on the mat.", "Prices rose."], "hypothesis": ["A cat is asleep.", "Dogs bark."]}
    got = judge.score("para-direct", **pairs)

    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tmp_path, gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file=path.name).double().eval()
    template = load_template("para-direct")
    want = [eq3(model, tokenizer, template.chat({"source": s, "hypothesis": h}), template.answers)
            for s, h in zip(pairs["source"], pairs["hypothesis"])]
    assert max(abs(a - b) for a, b in zip(got, want)) <= 1e-3, (got, want)
    assert abs(got[0] - got[1]) > 1e-4  # a real model, not a constant
    capfd.readouterr()
    again = Judge.load(str(path))  # from the cache this time: nothing to say
    assert capfd.readouterr().err == ""
    assert again.score("para-direct", **pairs) == pytest.approx(got, abs=1e-6)


def test_the_default_judges_first_use_says_so_in_one_line(tmp_path, monkeypatch, capfd):
    """The embedded judge's first use (its GGUF converted; for the vLLM engine, the shipped adapter merged into a copy)
    prints one line of its own and then transformers' de-quantization bar alone; later uses print nothing. The
    transformers engine's default judge keeps one copy of the weights and adds the adapter at each load: PEFT's merge.
    Here on the tiny GGUF and a LoRA adapter made for it."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from pluie_reward.engines.transformers import loading

    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path)
    adapter = tmp_path / "tiny-adapter"
    base = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file=path.name)
    get_peft_model(base, LoraConfig(r=2, target_modules=["q_proj"], init_lora_weights=False)).save_pretrained(adapter)
    monkeypatch.setattr(loading, "embedded_gguf_path", lambda: path)
    monkeypatch.setenv("PLUIE_REWARD_CACHE", str(tmp_path / "cache"))
    capfd.readouterr()
    model, _ = loading.load_model_and_tokenizer(None, default_adapter=adapter)  # what Judge.load() does
    said = capfd.readouterr().err.replace("\r", "\n").splitlines()
    assert said[0] == f"pluie-reward: converting the embedded judge (once, ~30 s) into {tmp_path}/cache", said
    assert all(line.startswith("Converting and de-quantizing GGUF tensors") for line in said[1:] if line.strip()), said
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [f"tiny-{path.stat().st_size}"]  # one copy of the weights
    import torch
    from peft import PeftModel

    base = AutoModelForCausalLM.from_pretrained(tmp_path / "cache" / f"tiny-{path.stat().st_size}")
    merged = PeftModel.from_pretrained(base, str(adapter)).merge_and_unload().state_dict()
    assert all(torch.equal(value, merged[name]) for name, value in model.state_dict().items())  # PEFT's merge, bit for bit
    name, converted = "model.layers.0.self_attn.q_proj.weight", tmp_path / "cache" / f"tiny-{path.stat().st_size}"
    assert not torch.equal(model.state_dict()[name], AutoModelForCausalLM.from_pretrained(converted).state_dict()[name])  # moved
    capfd.readouterr()
    folder = loading.default_model_dir(adapter)  # the vLLM engine's folder: merged once, beside the converted model
    assert capfd.readouterr().err.startswith("pluie-reward: merging the adapter tiny-adapter into")
    assert (folder / "config.json").is_file() and folder.name.startswith(f"tiny-{path.stat().st_size}+tiny-adapter-")
    assert loading.default_model_dir(adapter) == folder and loading.default_model_dir(None).is_dir()
    assert capfd.readouterr().err == ""


def test_a_conversion_hides_the_libraries_deprecation_warnings_and_keeps_the_others(capfd):
    """Deprecation warnings raised inside a conversion are about calls made there, not by the user: not shown (the
    first default-judge load printed transformers' `is_gradient_checkpointing` FutureWarning); other warnings are."""
    import warnings

    from pluie_reward.engines.transformers.loading import converting

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with converting("converting X (once)"):
            warnings.warn("`old_name` is deprecated", FutureWarning)
            warnings.warn("old API", DeprecationWarning)
            warnings.warn("the weights look odd", UserWarning)
    assert [str(w.message) for w in seen] == ["the weights look odd"]
    assert capfd.readouterr().err == "pluie-reward: converting X (once)\n"
