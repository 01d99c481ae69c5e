"""The GPU check cannot rot: ``python -m pluie_reward.tools.bench.gpu --tiny --device cpu`` runs every
section (exactness, throughput, sharing, a GRPO step) at tiny shapes on the CPU, and every cell of its
table is filled, no number is NaN, and every exactness row passes."""

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


@pytest.mark.slow  # ~16 s on 2 cores, ~32 s on one pytest-xdist worker's single thread (a fresh process included)
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
    assert {r["workload"] for r in result["throughput"]} >= {"GRPO, 1 x G=16, 32-token completions"}
    assert "error" not in result["grpo"], result["grpo"]
    assert 0 < result["grpo"]["reward_share"] < 1
    table = (tmp_path / "out" / "gpu.md").read_text()
    for line in table.splitlines():
        if line.startswith("|") and not set(line) <= set("|-: "):
            cells = [c.strip() for c in line.strip("|").split("|")]
            assert all(cells), line
            assert not any(re.fullmatch(r"(?i)nan|inf|not run|", c) for c in cells), line
    assert "not run" not in table and "failed:" not in table and "| NO |" not in table


def test_gpu_check_refuses_bad_options(tmp_path):
    from pluie_reward.tools.bench.gpu import main

    assert main(["--out", str(tmp_path), "--device", "cpu"]) == 2  # 7B shapes on a CPU
    assert main(["--out", str(tmp_path), "--tiny", "--device", "cpu", "--models", "gpt-5"]) == 2
    assert main(["--out", str(tmp_path), "--tiny", "--device", "cpu", "--budget", "nan"]) == 2
    assert main(["--out", str(tmp_path), "--tiny", "--device", "cpu", "--tokenizers", str(tmp_path / "missing")]) == 2
    assert not (tmp_path / "gpu.json").exists()
