"""GPU evidence in one command: exactness on CUDA, throughput of a 7B-shaped judge beside the plain
padded forward, the seeds' two-pass method and a generating judge, the memory of a judge sharing a PEFT
policy, and the reward's share of a GRPO step. Writes ``DIR/gpu.json`` and the Markdown table ``DIR/gpu.md``.

Sections (docs/benchmark.md, "GPU check"): a. :func:`exactness`; b. :func:`throughput` (b1: fused attention off,
b2: :func:`plain_scores`), b3. :func:`random_draws`; c. :func:`sharing`; d. :func:`grpo_step`. The models are random
weights of published shapes (nothing is downloaded) with the real tokenizers of ``--tokenizers``. ``--tiny --device
cpu`` runs every section at tiny shapes on the CPU in seconds (the test suite does), so the command cannot rot.

Example:
    $ pluie-reward bench gpu --out gpu-run --tokenizers ../shared/tokenizers
    $ python -m pluie_reward.tools.bench.gpu --out gpu-run --tokenizers ../shared/tokenizers   # the same
    >>> trie_tokens([[1, 2, 3], [1, 2, 4], [5]])  # distinct prefixes: 1, 12, 123, 124, 5
    5
"""

from __future__ import annotations

import argparse
import copy
import gc
import math
import sys
import tempfile
import traceback
from functools import cache, partial
from pathlib import Path
from typing import Any, Callable, Sequence

from ...core.judge import Judge
from ...integrations.rewards import PluieReward
from ..report import markdown_table, write_outputs
from ..shared import UsageError, comma_list, positive_float
from . import generative, measure
from .generative import judge_ids
from .grpo_share import TimedReward
from .measure import Clock, column_table, mib, synchronize
from .run import Workload, builtin_pairs, default_data_path, generate_answers, read_pairs, reference_scores

TEMPLATE = "para-fs"
PLAIN_ROWS = (16, 64)  # prompts per forward of the plain padded forward
WIDE_BATCH_TOKENS = {False: 16384, True: 2048}  # a second PLUIE column: batch_tokens raised from the default (4096 on GPUs)
TOLERANCE = 1e-3  # max |PLUIE - float64 reference| for an exactness row to pass
# Published shapes (config.json of each model); the weights are random.
SHAPES: dict[str, dict[str, Any]] = {
    "qwen2.5-7b": dict(model_type="qwen2", hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                       num_attention_heads=28, num_key_value_heads=4, vocab_size=152064, rope_theta=1e6,
                       rms_norm_eps=1e-6, tie_word_embeddings=False, tokenizer="qwen25-7b-instruct"),
    "llama-3-8b": dict(model_type="llama", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                       num_attention_heads=32, num_key_value_heads=8, vocab_size=128256, rope_theta=5e5,
                       rms_norm_eps=1e-5, tie_word_embeddings=False, tokenizer="llama3-8b-instruct"),
    "qwen2.5-1.5b": dict(model_type="qwen2", hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                         num_attention_heads=12, num_key_value_heads=2, vocab_size=151936, rope_theta=1e6,
                         rms_norm_eps=1e-6, tie_word_embeddings=True, tokenizer="qwen25-7b-instruct"),
}
# head_dim 32: the smallest vLLM's CPU attention takes (section e)
TINY_SHAPE = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1)


# helpers ---------------------------------------------------------------------------------------
timed = partial(measure.timed, rounds=2, warmup=True)  # median of 2 calls after an untimed one, unless told otherwise
_f = partial(measure.cell, none="not run")  # a gpu.md cell: "not run" where a section measured nothing
OUTPUTS = ("gpu.json", "gpu.md")


def trie_tokens(sequences: Sequence[Sequence[int]]) -> int:
    """Distinct prefixes over ``sequences``: the tokens computed when shared prefixes are computed once."""
    return len({tuple(seq[:end]) for seq in sequences for end in range(1, len(seq) + 1)})


def bf16_peak_flops(device: Any, tiny: bool) -> float:
    """FLOP/s of a square bf16 matmul (8192 on a GPU, 512 with ``tiny``): the card's practical peak."""
    import torch

    n = 512 if tiny else 8192
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    seconds, _, _ = timed(device, lambda: [a @ b for _ in range(10)], rounds=3)
    return 10 * 2 * n**3 / seconds


def load_tokenizer(folder: Path | None, name: str) -> Any:
    """A real tokenizer from ``folder/name``, else the package's tiny chat tokenizer (noted by the caller)."""
    from transformers import AutoTokenizer

    from ...testing import make_tiny_tokenizer  # lazy: CLI start-up (torch)

    if folder is not None and (folder / name).is_dir():
        tok = AutoTokenizer.from_pretrained(str(folder / name))
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token
        return tok
    return make_tiny_tokenizer()


def random_model(shape: str, tokenizer: Any, device: Any, dtype: Any, tiny: bool, seed: int = 0) -> Any:
    """A causal LM of a published ``shape``, random weights (``torch.manual_seed(seed)``) made on ``device``;
    its vocabulary at least the tokenizer's (``tiny``: tiny dimensions, the tokenizer's vocabulary + 128 rows)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    spec = {k: v for k, v in SHAPES[shape].items() if k != "tokenizer"}
    if tiny:
        spec.update(TINY_SHAPE)
    spec["vocab_size"] = len(tokenizer) + 128 if tiny else max(spec["vocab_size"], len(tokenizer))
    config = AutoConfig.for_model(spec.pop("model_type"), **spec, max_position_embeddings=4096,
                                  pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(seed)
    with torch.device(device):
        return AutoModelForCausalLM.from_config(config, dtype=dtype).eval()


def body_parameters(model: Any) -> int:
    """Parameters of the decoder layers (embeddings and output head left out: PLUIE reads one position)."""
    return sum(p.numel() for name, p in model.named_parameters() if ".layers." in name)


def completions(tokenizer: Any, text: str, count: int, length: int) -> list[str]:
    """``count`` different texts of about ``length`` tokens, windows over ``text``."""
    ids = tokenizer(text, add_special_tokens=False).input_ids
    while len(ids) < length + count * 7:
        ids = ids + ids
    return [tokenizer.decode(ids[7 * i : 7 * i + length]) for i in range(count)]


def plain_scores(model: Any, ids: Sequence[Sequence[int]], answers: Sequence[Sequence[int]], pad_id: int, rows: int) -> list[float]:
    """PLUIE as a user computes it by hand: prompts sorted by length, left-padded batches of ``rows``
    prompts (attention mask, positions from the mask), the model's own attention, ``logits_to_keep=1``,
    log p(Yes) - log p(No) at the last position.

    Args:
        model: a causal LM (in eval mode).
        ids: the prompt ids of each item, the answer position last.
        answers: the answers' token ids, Yes first (``judge.bind(TEMPLATE).answer_ids``: one token each).
        pad_id: the id written into the padding (masked out).
        rows: prompts per forward.

    Returns:
        The scores, in the order of ``ids``.

    Example:
        >>> from pluie_reward.testing import make_tiny_causal_lm, make_tiny_tokenizer
        >>> model = make_tiny_causal_lm(make_tiny_tokenizer())
        >>> one = plain_scores(model, [[5, 6, 7], [8, 9]], [(10,), (11,)], pad_id=0, rows=1)
        >>> both = plain_scores(model, [[5, 6, 7], [8, 9]], [(10,), (11,)], pad_id=0, rows=2)  # [8, 9] left-padded
        >>> max(abs(a - b) for a, b in zip(one, both)) < 1e-4
        True
    """
    import torch

    (yes,), (no,) = answers  # single-token Yes/No answers
    device = model.get_input_embeddings().weight.device
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    out = [0.0] * len(ids)
    with torch.inference_mode():
        for start in range(0, len(order), rows):
            batch = order[start : start + rows]
            pads = [max(len(ids[i]) for i in batch) - len(ids[i]) for i in batch]  # left padding of each prompt
            input_ids = torch.tensor([[pad_id] * pad + list(ids[i]) for pad, i in zip(pads, batch)], dtype=torch.long)
            mask = (torch.arange(input_ids.shape[1]) >= torch.tensor(pads)[:, None]).long()
            positions = (mask.cumsum(-1) - 1).clamp(min=0)
            logits = model(input_ids=input_ids.to(device), attention_mask=mask.to(device), position_ids=positions.to(device),
                           logits_to_keep=1, use_cache=False).logits[:, -1].float()
            logp = torch.log_softmax(logits, dim=-1)
            for i, value in zip(batch, (logp[:, yes] - logp[:, no]).tolist()):
                out[i] = value
    return out


def scoring_path(engine: Any, before: dict[str, int]) -> dict[str, Any]:
    """How ``engine`` scored since ``before`` (``dict(engine.stats)`` taken earlier): ``path`` ("shared prefix",
    or "whole prompts": its fallback), ``rows`` and ``plain_rows`` (of them on whole prompts), ``fast``, ``plain_reason``.

    Example:
        >>> class Engine:
        ...     stats, fast = {"rows": 24, "plain_rows": 0}, True
        ...     def plain_reason(self): return ""
        >>> scoring_path(Engine(), {"rows": 8, "plain_rows": 0})["path"]
        'shared prefix'
    """
    stats = getattr(engine, "stats", {})
    plain = stats.get("plain_rows", 0) - before.get("plain_rows", 0)
    fast = getattr(engine, "fast", None)
    return {"path": "shared prefix" if plain == 0 and fast is not False else "whole prompts",
            "rows": stats.get("rows", 0) - before.get("rows", 0), "plain_rows": plain, "fast": fast,
            "plain_reason": engine.plain_reason() if hasattr(engine, "plain_reason") else ""}


def free(*objects: Any) -> None:
    """Drop references and give the device's cached blocks back."""
    import torch

    del objects
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


# a. exactness ----------------------------------------------------------------------------------
def exactness(folder: Path | None, pairs: Sequence[tuple[str, str]], device: Any) -> list[dict[str, Any]]:
    """Judge.score vs the float64 two-pass reference, per real tokenizer and dtype.

    A row passes within :data:`TOLERANCE` of float64, or no further from it than twice the seeds' method in
    the same dtype (bf16 is never within 1e-3).
    """
    import torch

    from ...testing import make_tiny_causal_lm  # lazy: CLI start-up (torch)

    names = sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder is not None and folder.is_dir() else []
    rows = []
    sources, hypotheses = [s for s, _ in pairs], [h for _, h in pairs]
    for name in names or ["tiny (no --tokenizers)"]:
        tok = load_tokenizer(folder, name)  # no folder of that name: the tiny tokenizer
        base = make_tiny_causal_lm(tok)
        for dtype in (torch.float32, torch.bfloat16):
            model = copy.deepcopy(base).to(device, dtype)
            judge = Judge.from_model(model, tok)
            # the reference: the same (rounded) weights in float64, the seeds' two passes per pair
            ref = reference_scores(Judge.from_model(copy.deepcopy(model).to(torch.float64), tok), TEMPLATE, sources, hypotheses)
            scores = judge.score(TEMPLATE, source=sources, hypothesis=hypotheses, use_cache=False)
            diff = max(abs(a - b) for a, b in zip(scores, ref))
            seeds = reference_scores(judge, TEMPLATE, sources, hypotheses)  # the seeds' method in the same dtype
            two_pass = max(abs(a - b) for a, b in zip(seeds, ref))
            tolerance = max(TOLERANCE, 2 * two_pass)
            rows.append({"check": f"{name}, random 2-layer model", "dtype": str(dtype).removeprefix("torch."), "n": len(scores),
                         "score_range": [min(ref), max(ref)], "max_abs_diff": diff, "tolerance": tolerance,
                         "two_pass_same_dtype_diff": two_pass, "ok": diff <= tolerance})
            free(judge, model)
    return rows


# b. throughput ---------------------------------------------------------------------------------
def workloads(judge: Any, pairs: Sequence[tuple[str, str]], tiny: bool) -> list[tuple[str, list[str], list[str]]]:
    """(name, sources, hypotheses): MRPC pairs, then GRPO groups of G completions of L tokens (64 per call),
    then 16 x G=16 completions of 256 tokens (256 per call; tiny: 2 x G=16 of 24)."""
    n = 16 if tiny else 64
    out = [(f"MRPC, {n} pairs", [s for s, _ in pairs[:n]], [h for _, h in pairs[:n]])]
    text = " ".join(h for _, h in pairs)
    shapes = [(group, length, max(1, n // group)) for group in (8, 16) for length in ((16, 32) if tiny else (128, 512))]
    for group, length, groups in shapes + [(16, 24, 2) if tiny else (16, 256, 16)]:
        src, hyp = [], []
        for g in range(groups):
            src += [pairs[g][0]] * group
            hyp += completions(judge.tokenizer, text[g * 97 :] + text, group, length)
        out.append((f"GRPO, {groups} x G={group}, {length}-token completions", src, hyp))
    return out


def throughput(shape: str, folder: Path | None, pairs: Sequence[tuple[str, str]], device: Any, tiny: bool,
               peak: float, subset: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Rows of PLUIE / plain forward / two-pass / generating judge per workload on one random bf16 judge
    of ``shape``, and the batched-vs-one-at-a-time exactness row."""
    import torch

    from ...engines.transformers.attention import fused_attention  # lazy: CLI start-up (torch)

    tok = load_tokenizer(folder, SHAPES[shape]["tokenizer"])
    model = random_model(shape, tok, device, torch.bfloat16, tiny)
    judge = Judge.from_model(model, tok, name=f"random {shape}")
    params = body_parameters(model)
    wide = Judge.from_model(model, tok, batch_tokens=WIDE_BATCH_TOKENS[tiny])  # the same weights, larger forward batches
    answer_ids = judge.bind(TEMPLATE).answer_ids
    rows = []
    for name, src, hyp in workloads(judge, pairs, tiny):
        ids = judge_ids(judge, src, hyp)  # the prompts Judge.score reads: counted, and read by the plain forward
        tokens, distinct = sum(map(len, ids)), trie_tokens(ids)
        flops = 2 * params * distinct
        before = dict(judge.engine.stats)
        seconds, scores, mem = timed(device, lambda: judge.score(TEMPLATE, source=src, hypothesis=hyp, use_cache=False))
        path = scoring_path(judge.engine, before)
        wide_seconds, _, _ = timed(device, lambda: wide.score(TEMPLATE, source=src, hypothesis=hyp, use_cache=False))
        with fused_attention(False):  # the float32 scores the fused kernels replaced: before and after in one run
            f32_seconds, f32_scores, _ = timed(device, lambda: judge.score(TEMPLATE, source=src, hypothesis=hyp, use_cache=False))
        row = {"model": shape, "workload": name, "n": len(src), "prompt_tokens": tokens, "pluie_pairs_s": len(src) / seconds,
               "pluie_tokens_s": tokens / seconds, "pluie_peak_share": flops / seconds / peak, "pluie_peak_mib": mem.cuda_mb,
               "wide_batch_tokens": WIDE_BATCH_TOKENS[tiny], "wide_pairs_s": len(src) / wide_seconds,
               "wide_peak_share": flops / wide_seconds / peak, "distinct_tokens": distinct, "bound": tokens / distinct, **path,
               "f32_pairs_s": len(src) / f32_seconds, "f32_peak_share": flops / f32_seconds / peak, "fused_vs_f32": f32_seconds / seconds,
               "f32_max_abs_diff": max(abs(a - b) for a, b in zip(scores, f32_scores))}
        # the plain padded forward on the same items, each number of rows measured once (tiny: one call, its prompts are long)
        plain_forward = cache(lambda r: timed(device, lambda: plain_scores(model, ids, answer_ids, tok.pad_token_id, r),
                                              rounds=1 if tiny else 2, warmup=not tiny))
        for size in PLAIN_ROWS:
            plain_s, plain, plain_mem = plain_forward(min(size, len(src)))  # a size past n makes the batches of the size before
            row.update({f"plain{size}_pairs_s": len(src) / plain_s, f"plain{size}_peak_mib": plain_mem.cuda_mb,
                        f"plain{size}_max_abs_diff": max(abs(a - b) for a, b in zip(scores, plain))})
        best = max(row[f"plain{size}_pairs_s"] for size in PLAIN_ROWS)
        row.update({"plain_peak_share": 2 * params * tokens * best / len(src) / peak, "vs_plain": row["pluie_pairs_s"] / best,
                    "plain_max_abs_diff": max(row[f"plain{size}_max_abs_diff"] for size in PLAIN_ROWS)})
        k = min(subset, len(src))
        two, _, mem2 = timed(device, lambda: reference_scores(judge, TEMPLATE, src[:k], hyp[:k]), rounds=1)
        gen, (answers, _), mem3 = timed(device, lambda: generate_answers(judge, src[:k], hyp[:k], batch_size=k, max_new_tokens=8), rounds=1)
        row.update({"subset": k, "two_pass_pairs_s": k / two, "generate_pairs_s": k / gen, "two_pass_peak_mib": mem2.cuda_mb,
                    "generate_peak_mib": mem3.cuda_mb, "generate_unparsed": sum(a is None for a in answers),
                    "speedup_vs_two_pass": row["pluie_pairs_s"] / (k / two), "speedup_vs_generate": row["pluie_pairs_s"] / (k / gen)})
        rows.append(row)
    src, hyp = [s for s, _ in pairs[:8]], [h for _, h in pairs[:8]]
    batched = judge.score(TEMPLATE, source=src, hypothesis=hyp, use_cache=False)
    single = [judge.score(TEMPLATE, source=[s], hypothesis=[h], use_cache=False)[0] for s, h in zip(src, hyp)]
    diff = max(abs(a - b) for a, b in zip(batched, single))
    check = {"check": f"{shape} (random), batched vs one at a time", "dtype": "bfloat16", "n": len(src),
             "score_range": [min(single), max(single)], "max_abs_diff": diff, "tolerance": None, "ok": None}
    judge.close()
    wide.close()
    free(judge, wide, model)
    return rows, check


def random_draws(shape: str, folder: Path | None, pairs: Sequence[tuple[str, str]], device: Any, tiny: bool,
                 seeds: Sequence[int] = range(8)) -> list[dict[str, Any]]:
    """Per seed, a fresh random bf16 judge of ``shape`` (a key of :data:`SHAPES`) scores two GRPO groups
    (2 x G=8, the second workload's first 16 items).

    Returns:
        One row per seed: ``seed``, ``n``, ``max_abs_diff`` from :func:`plain_scores` on the same weights and
        :func:`scoring_path`'s keys.
    """
    import torch

    tok = load_tokenizer(folder, SHAPES[shape]["tokenizer"])
    rows, items = [], None
    for seed in seeds:
        model = random_model(shape, tok, device, torch.bfloat16, tiny, seed=seed)
        judge = Judge.from_model(model, tok, name=f"random {shape}, seed {seed}")
        _, src, hyp = items = items or workloads(judge, pairs, tiny)[1]
        src, hyp = src[:16], hyp[:16]
        before = dict(judge.engine.stats)
        scores = judge.score(TEMPLATE, source=src, hypothesis=hyp, use_cache=False)
        row = {"model": shape, "seed": seed, "n": len(src), **scoring_path(judge.engine, before)}
        plain = plain_scores(model, judge_ids(judge, src, hyp), judge.bind(TEMPLATE).answer_ids, tok.pad_token_id, PLAIN_ROWS[0])
        row["max_abs_diff"] = max(abs(a - b) for a, b in zip(scores, plain))
        rows.append(row)
        judge.close()
        del judge, model  # the next draw's weights take their place on the device
        free()
    return rows


# c. sharing ------------------------------------------------------------------------------------
def policy_with_lora(folder: Path | None, device: Any, tiny: bool) -> tuple[Any, Any]:
    """The 1.5B-shaped random bf16 policy with a LoRA adapter (r=16 on q/k/v/o), and its tokenizer."""
    import torch
    from peft import LoraConfig, get_peft_model

    tok = load_tokenizer(folder, SHAPES["qwen2.5-1.5b"]["tokenizer"])
    dtype = torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32
    model = random_model("qwen2.5-1.5b", tok, device, dtype, tiny)
    lora = LoraConfig(r=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], task_type="CAUSAL_LM")
    return get_peft_model(model, lora), tok


def sharing(policy: Any, tok: Any, pairs: Sequence[tuple[str, str]], device: Any, tiny: bool) -> dict[str, Any]:
    """Device bytes of the policy, what ``Judge.from_peft`` adds (kept after scoring; after ``clear_cache``),
    and the seconds per call of the shared judge beside a separate copy offloaded to the CPU."""
    import torch

    cuda = torch.device(device).type == "cuda"
    allocated = (lambda: torch.cuda.memory_allocated(device)) if cuda else (lambda: None)
    free()
    before = allocated()
    judge = Judge.from_peft(policy, tok)
    _, src, hyp = workloads(judge, pairs, tiny)[1]
    seconds, _, peak = timed(device, lambda: judge.score(TEMPLATE, source=src, hypothesis=hyp, use_cache=False))
    free()
    kept = allocated() - before if cuda else None
    judge.clear_cache()
    free()
    cleared = allocated() - before if cuda else None
    if cuda:  # a separate copy of the base weights, made on the device and parked on the CPU
        base = random_model("qwen2.5-1.5b", tok, device, next(policy.parameters()).dtype, tiny).to("cpu")
        free()
    else:
        base = copy.deepcopy(policy.get_base_model()).to("cpu")
    offloaded = Judge.from_model(base, tok, offload_device="cpu", device=device)
    off_seconds, _, _ = timed(device, lambda: offloaded.score(TEMPLATE, source=src, hypothesis=hyp, use_cache=False))
    offloaded.close()
    free(offloaded, base)
    return {"policy_bytes": before, "judge_kept_bytes": kept, "judge_kept_share": kept / before if cuda else None,
            "judge_bytes_after_clear_cache": cleared, "n": len(src), "shared_seconds": seconds, "shared_peak_mib": peak.cuda_mb,
            "offloaded_seconds": off_seconds, "offload_cost": off_seconds / seconds}


# d. GRPO ---------------------------------------------------------------------------------------
def grpo_step(policy: Any, tok: Any, pairs: Sequence[tuple[str, str]], device: Any, tiny: bool) -> dict[str, Any]:
    """Two ``GRPOTrainer`` steps (8 prompts x G=8 completions of 256 tokens; tiny: 2 x 4 of 16) with
    PluieReward on ``Judge.from_peft(policy)``; the second step's time and the reward's share of it."""
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    cuda = torch.device(device).type == "cuda"
    prompts, group, length = (2, 4, 16) if tiny else (8, 8, 256)
    sources = [s for s, _ in pairs[:prompts]]
    ds = Dataset.from_dict({"prompt": [[{"role": "user", "content": f"Paraphrase: {s}"}] for s in sources], "source": sources})
    judge = Judge.from_peft(policy, tok)
    reward = TimedReward(PluieReward(judge, template=TEMPLATE, fields={"source": "source"}))
    marks: list[tuple[float, float]] = []
    clock = Clock()

    class Steps(TrainerCallback):
        def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            synchronize(device)
            marks.append((clock.seconds, reward.seconds))

        on_step_end = on_step_begin

    with tempfile.TemporaryDirectory(prefix="pluie-gpu-grpo-") as out:
        args = GRPOConfig(output_dir=out, num_generations=group, per_device_train_batch_size=prompts * group,
                          max_completion_length=length, max_steps=2, logging_steps=1, report_to="none", save_strategy="no",
                          use_cpu=not cuda, bf16=cuda, seed=0, temperature=1.0)
        trainer = GRPOTrainer(model=policy, processing_class=tok, train_dataset=ds, args=args, reward_funcs=[reward], callbacks=[Steps()])
        trainer.train()
    (t0, r0), (t1, r1) = marks[-2], marks[-1]
    return {"prompts": prompts, "group": group, "completion_tokens": length, "step_seconds": t1 - t0,
            "reward_seconds": r1 - r0, "reward_share": (r1 - r0) / (t1 - t0), "reward_calls": reward.calls}


# e. vLLM's generative scoring -----------------------------------------------------------------
def generative_scoring(shape: str, folder: Path | None, pairs: Sequence[tuple[str, str]], device: Any, tiny: bool,
                       log: Callable[[str], None]) -> dict[str, Any]:
    """``bench generative`` (:func:`.generative.run`, 2 rounds) on a random judge of ``shape`` saved to a temporary folder
    (bf16 on a GPU) and on 16 of ``pairs``; ``{"skipped": ...}`` where vLLM is not installed."""
    import importlib.util

    import torch

    if importlib.util.find_spec("vllm") is None:
        return {"skipped": "vLLM is not installed here (docs/benchmark.md: `pluie-reward bench generative`)"}
    tok = load_tokenizer(folder, SHAPES[shape]["tokenizer"])
    model = random_model(shape, tok, device, torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32, tiny)
    with tempfile.TemporaryDirectory(prefix="pluie-gpu-vllm-") as saved:
        model.save_pretrained(saved)
        tok.save_pretrained(saved)
        workload = Workload("MRPC", [s for s, _ in pairs[:16]], [h for _, h in pairs[:16]])
        result = generative.run(Judge.from_model(model, tok), saved, [workload], TEMPLATE, 2, 2048 if tiny else 4096, log)
    free(model)
    return result


# report ----------------------------------------------------------------------------------------
# Judge.score's share of the bf16 peak on distinct tokens (GRPO groups, MRPC pairs); Judge.score / the best plain
# forward >= vs_bound x the bound (prompt tokens / distinct tokens) and >= vs_plain; memory and time shares
GOALS = {"peak_share_grpo": 0.50, "peak_share_mrpc": 0.35, "vs_bound": 0.7, "vs_plain": 1.0, "shared_memory": 0.01,
         "reward_share": 0.03}


def goal(value: float | None, target: float, higher: bool) -> str:
    """'met' or how far from the goal (None: not measured).

    Example:
        >>> goal(0.3, 0.4, True), goal(0.02, 0.05, False), goal(None, 1, True)
        ('missed (0.75x of the goal)', 'met', 'not measured')
    """
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "not measured"
    if (value >= target) if higher else (value <= target):
        return "met"
    return f"missed ({value / target:.2f}x of the goal)"


def goal_values(result: dict[str, Any]) -> dict[str, Any]:
    """The goals' measured values and targets (:data:`GOALS`) from ``result`` (``gpu.json``, its sections run).

    Returns:
        ``workloads`` (per throughput row: peak share, speed over the best plain forward, their goals),
        ``shared_memory``, ``reward_share``, ``random_draws_shared`` and ``random_draws`` (None where a section failed).

    Example:
        >>> row = {"model": "m", "workload": "MRPC, 16 pairs", "pluie_peak_share": 0.2, "vs_plain": 1.5, "bound": 1.25}
        >>> g = goal_values({"throughput": [row], "sharing": {"error": "x"}, "grpo": {"error": "x"}, "random_draws": []})
        >>> g["workloads"][0]["peak_share_goal"], g["workloads"][0]["vs_plain_goal"], g["shared_memory"]
        (0.35, 1.0, None)
    """
    rows = [{"model": r["model"], "workload": r["workload"], "peak_share": r["pluie_peak_share"], "vs_plain": r["vs_plain"],
             "bound": r["bound"], "peak_share_goal": GOALS["peak_share_mrpc" if r["workload"].startswith("MRPC") else "peak_share_grpo"],
             "vs_plain_goal": max(GOALS["vs_bound"] * r["bound"], GOALS["vs_plain"])} for r in result["throughput"]]
    draws = result.get("random_draws")
    ran = isinstance(draws, list)
    return {"workloads": rows, "shared_memory": None if failed(result["sharing"]) else result["sharing"]["judge_kept_share"],
            "reward_share": None if failed(result["grpo"]) else result["grpo"]["reward_share"],
            "random_draws_shared": sum(d["path"] == "shared prefix" for d in draws) if ran else None,
            "random_draws": len(draws) if ran else None}


def markdown(result: dict[str, Any]) -> str:
    """``gpu.md``: the machine, then one table per section and the goals."""
    def table(value: Any, rows: Any, columns: list[tuple[str, Any, str | None]]) -> str:  # a section's table, or its error
        return f"failed: {failed(value)}" if failed(value) else column_table(rows, columns, none="not run")

    cpu, draws, s, g, e = "n/a on CPU", result.get("random_draws"), result["sharing"], result["grpo"], result["generative"]
    model, n = [("model", "model", None), ("workload", "workload", None), ("n", "n", "d")], ("n", "n", "d")
    out = [f"# GPU check: {result['device_name']}",
           f"torch {result['torch']}, transformers {result['transformers']}, shapes: {'tiny' if result['tiny'] else 'published'}; "
           f"bf16 matmul peak measured: {result['peak_tflops']:.3g} TFLOP/s; {result['seconds']:.0f} s in all.",
           "## a. Exactness (max |PLUIE - reference|; reference: seed eq. 3 two-pass on float64 copies of the same weights)",
           table(result["exactness"], result["exactness"], [
               ("check", "check", None), ("dtype", "dtype", None), n,
               ("score range", lambda r: f"{r['score_range'][0]:.2f} .. {r['score_range'][1]:.2f}", "s"),
               ("max abs diff", "max_abs_diff", ".1e"), ("seeds' two-pass, same dtype",
                                                          lambda r: _f(r.get("two_pass_same_dtype_diff"), ".1e", none="-"), "s"),
               ("tolerance", lambda r: "informative" if r["tolerance"] is None else r["tolerance"], ".1e"),
               ("ok", lambda r: "-" if r["ok"] is None else ("yes" if r["ok"] else "NO"), None)]),
           "## b. Throughput (random bf16 weights; two-pass and generating judge on the first `subset` items; "
           f"larger batches: batch_tokens={WIDE_BATCH_TOKENS[result['tiny']]})",
           "\n".join([column_table(result["throughput"], model + [
               ("PLUIE pairs/s", "pluie_pairs_s", ".1f"), ("PLUIE tokens/s", "pluie_tokens_s", ".0f"),
               ("share of bf16 peak", "pluie_peak_share", ".1%"), ("peak MiB", lambda r: _f(r["pluie_peak_mib"], ".0f", none=cpu), "s"),
               ("pairs/s, larger batches", "wide_pairs_s", ".1f"), ("share of peak, larger batches", "wide_peak_share", ".1%"),
               ("two-pass pairs/s", "two_pass_pairs_s", ".1f"), ("generating pairs/s", "generate_pairs_s", ".1f"),
               ("x two-pass", "speedup_vs_two_pass", ".1f"), ("x generating", "speedup_vs_generate", ".1f"), ("subset", "subset", "d")],
               none="not run")] + [f"failed: {key[len('throughput '):]}: {value['error']}"
                                   for key, value in result.items() if key.startswith("throughput ")]),
           "## b1. Fused attention kernels against the float32 scores they replaced (the same judge, "
           "`fused_attention(False)`; max abs diff: between the two paths' scores)",
           column_table(result["throughput"], model + [
               ("PLUIE pairs/s", "pluie_pairs_s", ".1f"), ("share of bf16 peak", "pluie_peak_share", ".1%"),
               ("float32 attention pairs/s", "f32_pairs_s", ".1f"), ("its share of peak", "f32_peak_share", ".1%"),
               ("fused / float32", "fused_vs_f32", ".2f"), ("max abs diff", "f32_max_abs_diff", ".1e")], none="not run"),
           f"## b2. Against the plain forward (prompts sorted by length, left-padded batches of {' and '.join(map(str, PLAIN_ROWS))}, "
           "the model's own attention, logits_to_keep=1; bound: prompt tokens / distinct tokens)",
           column_table(result["throughput"], model + [
               ("prompt tokens", "prompt_tokens", "d"), ("distinct tokens", "distinct_tokens", "d"), ("bound", "bound", ".2f"),
               ("plain pairs/s, 16 rows", "plain16_pairs_s", ".1f"), ("plain pairs/s, 64 rows", "plain64_pairs_s", ".1f"),
               ("plain share of peak (all tokens)", "plain_peak_share", ".1%"), ("PLUIE pairs/s", "pluie_pairs_s", ".1f"),
               ("PLUIE / best plain", "vs_plain", ".2f"), ("judge's path", path_cell, None),
               ("max abs diff from plain", "plain_max_abs_diff", ".1e")], none="not run"),
           "## b3. Random draws (bf16, a fresh judge per seed, 2 x G=8 items; max abs diff: from the plain forward)",
           table(draws, draws or [], [("model", "model", None), ("seed", "seed", "d"), n, ("judge's path", path_cell, None),
                                      ("engine.fast", lambda d: str(d["fast"]), None), ("max abs diff from plain", "max_abs_diff", ".1e")]),
           "## c. A judge sharing the policy (1.5B-shaped, LoRA r=16)",
           table(s, [s], [("policy MiB", lambda r: _f(mib(r["policy_bytes"]), ".0f", none=cpu), "s"),
                          ("judge keeps MiB (caches)", lambda r: _f(mib(r["judge_kept_bytes"]), ".1f", none=cpu), "s"),
                          ("share of policy", lambda r: _f(r["judge_kept_share"], ".2%", none=cpu), "s"),
                          ("after clear_cache MiB", lambda r: _f(mib(r["judge_bytes_after_clear_cache"]), ".1f", none=cpu), "s"),
                          ("shared s/call", "shared_seconds", ".3f"), ("offloaded s/call", "offloaded_seconds", ".3f"),
                          ("offload cost", lambda r: _f(r["offload_cost"], ".1f") + "x", "s")]),
           "## d. Reward share of a GRPO step (trl.GRPOTrainer, second step)",
           table(g, [g], [("prompts x G", lambda r: f"{r['prompts']} x {r['group']}", "s"),
                          ("completion tokens", "completion_tokens", "d"), ("step s", "step_seconds", ".2f"),
                          ("reward s", "reward_seconds", ".3f"), ("reward share", "reward_share", ".1%")]),
           "## e. vLLM's generative scoring beside Judge.score (`bench generative`, random weights)",
           e.get("skipped") or (f"failed: {failed(e)}" if failed(e) else generative.format_tables(e))]
    g, grpo = result["goals"], result["grpo"]
    rows = []
    for w in g["workloads"]:
        where = f"{w['model']}, {w['workload']}"
        rows += [["Judge.score: share of bf16 peak on distinct tokens", where, _f(w["peak_share"], ".1%"), f">= {w['peak_share_goal']:.0%}",
                  goal(w["peak_share"], w["peak_share_goal"], True)],
                 [f"Judge.score / best plain (bound {w['bound']:.2f})", where, _f(w["vs_plain"], ".2f"),
                  f">= {w['vs_plain_goal']:.2f} ({GOALS['vs_bound']:g} x bound, at least {GOALS['vs_plain']:g})",
                  goal(w["vs_plain"], w["vs_plain_goal"], True)]]
    draws_where = f"{draws[0]['model']}, seeds {draws[0]['seed']}-{draws[-1]['seed']}" if isinstance(draws, list) and draws else "-"
    rows += [["shared judge: memory kept / the policy's", "qwen2.5-1.5b policy", _f(g["shared_memory"], ".2%", none=cpu),
              f"<= {GOALS['shared_memory']:.0%}", goal(g["shared_memory"], GOALS["shared_memory"], False)],
             ["reward's share of a GRPO step", "-" if failed(grpo) else "{prompts} x G={group}, {completion_tokens} tokens".format(**grpo),
              _f(g["reward_share"], ".1%"),
              f"<= {GOALS['reward_share']:.0%}", goal(g["reward_share"], GOALS["reward_share"], False)],
             ["random draws on the shared-prefix path", draws_where, f"{_f(g['random_draws_shared'])} of {_f(g['random_draws'])}",
              f"all {_f(g['random_draws'])}", goal(g["random_draws_shared"], g["random_draws"] or 1, True)]]
    out += ["## Goals", markdown_table(["goal", "where", "measured", "target", "verdict"], rows, align="llrll")]
    return "\n\n".join(out) + "\n"


def path_cell(row: dict[str, Any]) -> str:
    """The judge's path as a table cell: "shared prefix", or "whole prompts (k of n rows): why".

    Example:
        >>> path_cell({"path": "whole prompts", "plain_rows": 16, "rows": 16, "plain_reason": "its attention implementation is 'eager'"})
        "whole prompts (16 of 16 rows): its attention implementation is 'eager'"
    """
    if row["path"] == "shared prefix":
        return row["path"]
    why = f": {row['plain_reason']}" if row.get("plain_reason") else ""
    return f"whole prompts ({row['plain_rows']} of {row['rows']} rows){why}"


# the command -----------------------------------------------------------------------------------
def section(result: dict[str, Any], key: str, work: Callable[[], Any], out: Path, log: Callable[[str], None]) -> Any:
    """``result[key] = work()``, or ``{"error": ...}`` (traceback logged) so a broken section costs no other;
    the partial ``gpu.json`` is written after each section."""
    try:
        result[key] = work()
    except Exception as err:  # noqa: BLE001 - reported in the table, and the command exits 1
        log(traceback.format_exc())
        result[key] = {"error": f"{type(err).__name__}: {err}"}
    write_outputs(out, result, names=OUTPUTS, indent=1)
    return result[key]


def failed(value: Any) -> str | None:
    """The error a section recorded, if it failed."""
    return value["error"] if isinstance(value, dict) and "error" in value else None


def run(out: Path, device: str, tiny: bool, tokenizers: Path | None, data: Path | None, models: Sequence[str],
        budget_s: float, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Every section in turn; returns what ``gpu.json`` holds (also written, with ``gpu.md``, into ``out``)."""
    import torch
    import transformers

    clock = Clock()

    def step(key: str, label: str, work: Callable[[], Any]) -> Any:  # one section, then its line in the log
        got = section(result, key, work, out, log)
        log(f"[gpu] {label} done ({clock.seconds:.0f} s)")
        return got

    pairs = read_pairs(data) if data is not None else builtin_pairs()[:64]
    name = torch.cuda.get_device_name(device) if torch.device(device).type == "cuda" else f"CPU ({torch.get_num_threads()} threads)"
    result: dict[str, Any] = {"device_name": name, "tiny": tiny, "torch": torch.__version__, "transformers": transformers.__version__,
                              "data": str(data) if data else "built-in pairs", "tokenizers": str(tokenizers) if tokenizers else None}
    result["peak_flops"] = bf16_peak_flops(device, tiny)
    result["peak_tflops"] = result["peak_flops"] / 1e12
    log(f"[gpu] {name}: bf16 peak {result['peak_tflops']:.3g} TFLOP/s")
    step("exactness", "a. exactness", lambda: exactness(tokenizers, pairs[: 4 if tiny else 8], device))
    result["throughput"] = []
    for shape in models:
        if result["throughput"] and clock.seconds > budget_s / 2:
            log(f"[gpu] b. {shape} skipped: {clock.seconds:.0f} s spent of the {budget_s:.0f} s budget")
            continue
        got = step(f"throughput {shape}", f"b. {shape}",
                   lambda: throughput(shape, tokenizers, pairs, device, tiny, result["peak_flops"], subset=4 if tiny else 16))
        if not failed(got):
            result["throughput"] += got[0]
            if isinstance(result["exactness"], list):
                result["exactness"].append(got[1])
            del result[f"throughput {shape}"]
    draws = range(2 if tiny else 8)  # seeds
    step("random_draws", "b3. random draws", lambda: random_draws(models[0], tokenizers, pairs, device, tiny, draws))
    policy, tok = policy_with_lora(tokenizers, device, tiny)
    step("sharing", "c. sharing", lambda: sharing(policy, tok, pairs, device, tiny))
    step("grpo", "d. grpo", lambda: grpo_step(policy, tok, pairs, device, tiny))
    step("generative", "e. generative scoring", lambda: generative_scoring(models[0], tokenizers, pairs, device, tiny, log))
    result["goals"] = goal_values(result)
    result["seconds"] = clock.seconds
    write_outputs(out, result, markdown(result), names=OUTPUTS, indent=1)
    return result


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    """Options of ``pluie-reward bench gpu`` (and ``python -m pluie_reward.tools.bench.gpu``)."""
    parser.add_argument("--out", type=Path, required=True, help="folder for gpu.json and gpu.md")
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu (with --tiny)")
    parser.add_argument("--tiny", action="store_true", help="tiny shapes: every section in under a minute on a CPU")
    parser.add_argument("--tokenizers", type=Path, default=None, help="../shared/tokenizers (default: that folder if it exists)")
    parser.add_argument("--data", type=Path, default=None,
                        help="PARAPHRASUS ms-mrpc.json (default: found as the bench finds it, else built-in pairs)")
    parser.add_argument("--models", type=comma_list(list(SHAPES), unique=True), default="qwen2.5-7b,llama-3-8b",
                        help="judge shapes for b, in order (default qwen2.5-7b,llama-3-8b)")
    parser.add_argument("--budget", type=positive_float, default=420.0,
                        help="seconds; a later judge shape is skipped past half of it (default 420)")


def run_args(args: argparse.Namespace) -> int:
    """Check the options (:class:`UsageError`), run every section, print gpu.md; 1 when a section failed."""
    import torch  # lazy: CLI start-up

    if torch.device(args.device).type == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device here; use --tiny --device cpu to check the command on a CPU.")
    if args.device == "cpu" and not args.tiny:
        raise UsageError("--device cpu needs --tiny (7B shapes on a CPU would take hours).")
    tokenizers = args.tokenizers
    if tokenizers is None and Path("../shared/tokenizers").is_dir():
        tokenizers = Path("../shared/tokenizers")
    if tokenizers is not None and not tokenizers.is_dir():
        raise UsageError(f"--tokenizers {tokenizers}: no such folder.")
    data = args.data
    if data is None:
        data = default_data_path()
        data = data if data is not None and data.is_file() else None
    text = markdown(run(args.out, args.device, args.tiny, tokenizers, data, args.models, args.budget))
    print(text)
    return 1 if "failed: " in text else 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m pluie_reward.tools.bench.gpu`` (the same as ``pluie-reward bench gpu``); exit 2 with a message on bad options."""
    parser = argparse.ArgumentParser(prog="python -m pluie_reward.tools.bench.gpu", description=__doc__.split("\n\n")[0])
    add_cli_args(parser)
    try:
        args = parser.parse_args(argv)
    except SystemExit as done:  # --help, or an option argparse refused (its message printed)
        return done.code if isinstance(done.code, int) else 2
    try:
        return run_args(args)
    except UsageError as err:
        print(f"python -m pluie_reward.tools.bench.gpu: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
