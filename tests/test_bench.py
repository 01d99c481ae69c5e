"""Smoke test of the benchmark (2 pairs, tiny random judge) and its parts; no timed assertions."""

import math

import torch

from pluie_reward.tools.bench import run as bench
from pluie_reward.tools.cli import main
from pluie_reward.engines.transformers.attention import partial_attention

from conftest import mrpc_pairs


def test_parse_answer_reads_json_then_bare_words():
    assert bench.parse_answer('{"answer": "Yes"}') is True
    assert bench.parse_answer(' {"answer": "no"} ') is False
    assert bench.parse_answer('{"answer": "Yes') is True  # cut by max_new_tokens: bare word
    assert bench.parse_answer("No, they differ.") is False
    assert bench.parse_answer('{"verdict": 1} yes') is True
    assert bench.parse_answer("Maybe. Nope.") is None
    assert bench.parse_answer("") is None


def test_yes_no_prompt_is_the_seed_prompt_without_pdf_artifacts():
    prompt = bench.yes_no_prompt()
    assert prompt["system"] == (
        "You will receive two sentences A and B, you will have to identify if they mean the same thing. "
        "In your answer please only provide the answers to the question."
    )
    user = prompt["user"]
    assert user.count("[Sentence A]:") == 7 and user.count("[Sentence B]:") == 7  # 6 examples + the data
    assert user.startswith("[BEGIN EXAMPLES]\n***\n[Sentence A]: Amrozi")
    assert user.endswith('Answer "Yes" or "No".\nYou do not need to explain the reason.\n'
                         "Your response must be RFC8259 compliant JSON following this schema:\n"
                         '{"answer": str }')
    assert '""' not in user and "{{" not in user
    turns = bench.yes_no_messages(prompt, "S one.", "H two.")
    assert [t["role"] for t in turns] == ["system", "user"]
    assert '[Sentence A]: "S one."\n***\n[Sentence B]: "H two."' in turns[1]["content"]


def test_grpo_workload_has_distinct_hypotheses_per_source():
    sources, hypotheses, _ = mrpc_pairs(20)
    workload = bench.grpo_workload(list(zip(sources, hypotheses)), sources=3, per_source=8)
    assert len(workload) == 24
    for k in range(3):
        block = workload.hypotheses[8 * k : 8 * k + 8]
        assert set(workload.sources[8 * k : 8 * k + 8]) == {sources[k]}
        assert len(set(block)) == 8 and block[0] == hypotheses[k] and block[1] == sources[k]


def test_partial_attention_kernels_match_a_float64_softmax():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 3, 5, 8), torch.randn(2, 3, 7, 8), torch.randn(2, 3, 7, 8)
    scores = (q.double() @ k.double().transpose(-1, -2)) * 0.3
    expected_lse = torch.logsumexp(scores, -1)
    expected = torch.softmax(scores, -1) @ v.double()
    out, lse = partial_attention(q, k, v, 0.3, causal=False)  # CPU: PyTorch's fused kernel
    assert torch.allclose(out.double(), expected, atol=1e-5) and torch.allclose(lse.double(), expected_lse, atol=1e-5)
    out, lse = partial_attention(q, k, v, 0.3, causal=False, fused=False)  # the path other devices use
    assert torch.allclose(out.double(), expected, atol=1e-5) and torch.allclose(lse.double(), expected_lse, atol=1e-5)
    square = scores[..., :5].masked_fill(torch.ones(5, 5, dtype=torch.bool).triu(1), -math.inf)  # query i sees keys <= i
    for fused in (True, False):
        out, lse = partial_attention(q, k[:, :, :5], v[:, :, :5], 0.3, causal=True, fused=fused)
        assert torch.allclose(out.double(), torch.softmax(square, -1) @ v[:, :, :5].double(), atol=1e-5)
        assert torch.allclose(lse.double(), torch.logsumexp(square, -1), atol=1e-5)


def test_grpo_shaped_batch_matches_the_float64_reference(tiny_judge):
    """Several sources x several hypotheses: group prefixes built in one batch stay exact."""
    from test_reference import reference_pluie

    sources, hypotheses, _ = mrpc_pairs(20)
    workload = bench.grpo_workload(list(zip(sources, hypotheses)), sources=3, per_source=3)
    expected = [reference_pluie(tiny_judge.model, tiny_judge.tokenizer, s, h)
                for s, h in zip(workload.sources, workload.hypotheses)]
    tiny_judge.clear_cache()
    passes = tiny_judge.engine.stats["prefix_passes"]
    got = tiny_judge.score("para-fs", source=workload.sources, hypothesis=workload.hypotheses)
    assert tiny_judge.engine.stats["prefix_passes"] - passes == 2  # the template prefix, then 3 sources at once
    assert max(abs(a - b) for a, b in zip(got, expected)) <= 1e-3


def test_benchmark_runs_on_two_pairs(tiny_judge):
    sources, hypotheses, _ = mrpc_pairs(2)
    workload = bench.Workload("mrpc", sources, hypotheses, "2 MRPC pairs")
    result = bench.run_workload(tiny_judge, workload, rounds=1, sample_every=1, generate_batch_size=2)
    assert set(result.results) == set(bench.METHODS)
    for method in result.results.values():
        assert method.pairs == 2 and method.seconds > 0 and method.peak_rss_mb > 0
    assert set(result.results["generate"].texts) == {0, 1}
    # the seeds' two-pass method (float32 model loss over ~10^3 tiny-tokenizer tokens) and Judge.score agree
    assert result.max_diff() <= 1e-2
    table = bench.format_table(result)
    assert "(1) seed reference" in table and "(3) Judge.score" in table
    assert any("max |(3) - (1)|" in line for line in bench.target_lines([result]))


def test_bench_command_is_registered_and_reports_bad_input(tmp_path, capsys):
    code = main(["bench", "--data", str(tmp_path / "missing.json")])
    assert code == 2
    assert "pass --data" in capsys.readouterr().err
    (tmp_path / "pairs.json").write_text('{"1": {"sentence1": "a", "sentence2": "b"}}')
    assert main(["bench", "--data", str(tmp_path / "pairs.json"), "--workloads", "mrpc"]) == 2  # too few pairs
    assert "needs 64" in capsys.readouterr().err
