"""The GPU check cannot rot: ``python -m pluie_reward.tools.bench.gpu --tiny --device cpu`` runs every
section (exactness, throughput beside the plain padded forward, random draws, sharing, a GRPO step) at tiny
shapes on the CPU, and every cell of its table is filled, no number is NaN, and every exactness row passes.
The plain forward itself reads Judge.score's scores on a float32 model."""

import importlib.util
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SHARED

ROOT = Path(__file__).resolve().parents[1]


def numbers(value):
    if isinstance(value, dict):
        for v in value.values():
            yield from numbers(v)
    elif isinstance(value, list):
        for v in value:
            yield from numbers(v)
    elif isinstance(value, float):
        yield value


# ~16 s on 2 cores, ~32 s on one pytest-xdist worker's single thread (a fresh process included); the plain
# forward and the random draws added ~5 s of CPU time (13 -> 18 s on one thread)
@pytest.mark.slow
def test_tiny_gpu_check_fills_every_cell(tmp_path):
    pytest.importorskip("trl")
    args = [sys.executable, "-m", "pluie_reward.tools.bench.gpu", "--tiny", "--device", "cpu", "--out", str(tmp_path / "out"),
            "--models", "qwen2.5-7b"]
    tokenizers = SHARED / "tokenizers"
    if tokenizers.is_dir():  # one real family (Mistral: "▁Yes"); the other sections take the tiny tokenizer
        chosen = tmp_path / "tokenizers"
        chosen.mkdir()
        (chosen / "mistral-7b-instruct-v0.2").symlink_to(tokenizers / "mistral-7b-instruct-v0.2")
        args += ["--tokenizers", str(chosen)]
    done = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=1500,
                          env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((tmp_path / "out" / "gpu.json").read_text())
    assert all(math.isfinite(x) for x in numbers(result))
    assert result["peak_flops"] > 0
    rows = result["exactness"]
    checked = [r for r in rows if r["ok"] is not None]
    assert len(checked) == 2  # the family in float32 and bfloat16  # each family in float32 and bfloat16
    for r in checked:  # within 1e-3, or no further from float64 than twice the seeds' own method in that dtype
        assert r["max_abs_diff"] <= max(1e-3, 2 * r["two_pass_same_dtype_diff"]), r
        if r["dtype"] == "float32":
            assert r["max_abs_diff"] <= 1e-3, r
        assert r["score_range"][1] - r["score_range"][0] > 0.1  # the random model's scores differ: the check can fail
    assert {r["workload"] for r in result["throughput"]} >= {"GRPO, 1 x G=16, 32-token completions", "GRPO, 2 x G=16, 24-token completions"}
    for r in result["throughput"]:  # the plain padded forward beside Judge.score, on the same items
        best = max(r["plain16_pairs_s"], r["plain64_pairs_s"])
        assert r["vs_plain"] == pytest.approx(r["pluie_pairs_s"] / best)
        assert r["bound"] == pytest.approx(r["prompt_tokens"] / r["distinct_tokens"]) and r["bound"] > 1
        assert r["path"] == "shared prefix" and r["plain_rows"] == 0 < r["rows"], r
        assert r["plain_max_abs_diff"] < 0.05, r  # bf16: the two read the same scores up to rounding
        assert r["fused_vs_f32"] == pytest.approx(r["pluie_pairs_s"] / r["f32_pairs_s"])  # b1: the same judge, kernels off
        assert r["f32_max_abs_diff"] < 0.05, r
    draws = result["random_draws"]
    assert [d["seed"] for d in draws] == [0, 1] and all(d["path"] == "shared prefix" for d in draws), draws
    goals = result["goals"]["workloads"]
    assert len(goals) == len(result["throughput"])
    for g, r in zip(goals, result["throughput"]):
        assert g["vs_plain_goal"] == pytest.approx(max(0.7 * r["bound"], 1.0))
        assert g["peak_share_goal"] == (0.35 if r["workload"].startswith("MRPC") else 0.5)
    assert "error" not in result["grpo"], result["grpo"]
    assert 0 < result["grpo"]["reward_share"] < 1
    table = (tmp_path / "out" / "gpu.md").read_text()
    for line in table.splitlines():
        if line.startswith("|") and not set(line) <= set("|-: "):
            cells = [c.strip() for c in line.strip("|").split("|")]
            assert all(cells), line
            assert not any(re.fullmatch(r"(?i)nan|inf|not run|", c) for c in cells), line
    assert "not run" not in table and "failed:" not in table and "| NO |" not in table
    assert table.count("| Judge.score / best plain (bound ") == len(result["throughput"])
    assert "## b1. Fused attention kernels" in table and "## b2. Against the plain forward" in table and "## b3. Random draws" in table
    generative = result["generative"]  # e: skipped only where vLLM is missing (tests/test_bench_generative.py runs it)
    assert ("skipped" in generative) == (importlib.util.find_spec("vllm") is None), generative
    assert "## e. vLLM's generative scoring" in table and (generative.get("skipped") or "/generative_scoring, exact prompt ids") in table


@pytest.mark.parametrize("name", ["tiny", "mistral-7b-instruct-v0.2"])
def test_plain_forward_equals_judge_score(name):
    """The plain padded forward the GPU command times Judge.score against reads the same scores on a
    float32 model: left padding (prompts of different lengths share each batch), the last position."""
    import torch

    from conftest import shared_tokenizer
    from pluie_reward import Judge
    from pluie_reward.testing import make_tiny_causal_lm, make_tiny_tokenizer
    from pluie_reward.tools.bench.gpu import TEMPLATE, judge_ids, plain_scores
    from pluie_reward.tools.bench.run import builtin_pairs

    BUILTIN_PAIRS = builtin_pairs()[:8]

    tok = make_tiny_tokenizer() if name == "tiny" else shared_tokenizer(name)
    model = make_tiny_causal_lm(tok)
    judge = Judge.from_model(model, tok)
    src = [s for s, _ in BUILTIN_PAIRS] + [BUILTIN_PAIRS[0][0]] * 4  # pairs, and a group sharing its source
    hyp = [h for _, h in BUILTIN_PAIRS] + [h for _, h in BUILTIN_PAIRS[4:]]
    ids = judge_ids(judge, src, hyp)
    assert len({len(x) for x in ids}) > 3  # the batches need padding
    expected = judge.score(TEMPLATE, source=src, hypothesis=hyp, use_cache=False)
    yes, no = (a for (a,) in judge.bind(TEMPLATE).answer_ids)
    with torch.no_grad():  # one prompt at a time, no padding: log p(Yes) - log p(No) at the last position
        last = [torch.log_softmax(model(input_ids=torch.tensor([x])).logits[0, -1].double(), -1) for x in ids]
    by_hand = [float(lp[yes] - lp[no]) for lp in last]
    assert max(by_hand) - min(by_hand) > 0.1  # the random model's scores differ: a wrong row would show
    assert max(abs(a - b) for a, b in zip(expected, by_hand)) < 1e-4
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    for rows in (16, 5):  # one batch; several, sorted by length
        got = plain_scores(model, ids, judge.bind(TEMPLATE).answer_ids, pad, rows)
        assert max(abs(a - b) for a, b in zip(got, expected)) < 1e-4, rows


def test_gpu_check_refuses_bad_options(tmp_path):
    from pluie_reward.tools.bench.gpu import main

    assert main(["--out", str(tmp_path), "--device", "cpu"]) == 2  # 7B shapes on a CPU
    assert main(["--out", str(tmp_path), "--tiny", "--device", "cpu", "--models", "gpt-5"]) == 2
    assert main(["--out", str(tmp_path), "--tiny", "--device", "cpu", "--budget", "nan"]) == 2
    assert main(["--out", str(tmp_path), "--tiny", "--device", "cpu", "--tokenizers", str(tmp_path / "missing")]) == 2
    assert not (tmp_path / "gpu.json").exists()
