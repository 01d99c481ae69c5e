"""Smoke test of the benchmark (2 pairs, tiny random judge) and its parts; no timed assertions."""

import json
import math
import re
from pathlib import Path

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


def test_generate_answers_pads_on_the_left_and_leaves_the_tokenizer_as_it_was(tiny_judge, monkeypatch):
    """Prompts of different lengths in one batch generate what each generates alone (left padding: the new tokens
    follow every prompt's last token), and the tokenizer's own padding side is untouched."""
    sources, hypotheses, _ = mrpc_pairs(3)
    hypotheses[1] += " and then some more words that make this prompt longer than the others"
    monkeypatch.setattr(tiny_judge.tokenizer, "padding_side", "right")  # restored after the test (a session's judge)
    _, batched = bench.generate_answers(tiny_judge, sources, hypotheses, batch_size=3, max_new_tokens=6)
    alone = [bench.generate_answers(tiny_judge, [s], [h], batch_size=1, max_new_tokens=6)[1][0] for s, h in zip(sources, hypotheses)]
    assert batched == alone and len(set(alone)) > 1
    assert tiny_judge.tokenizer.padding_side == "right"


def test_edit_variants_skip_empty_and_repeated_texts_then_number_the_rest():
    """A one-word source: no edit applies but the word from the pool ("also", none given), so after the partner
    (skipped when empty or equal to the source) and the source, the remaining variants are numbered."""
    assert bench.edit_variants("a", "a", [], 3) == ["a", "also", "a (2)"]
    assert bench.edit_variants("a", "", [], 3) == ["a", "also", "a (2)"]
    assert bench.edit_variants("a", "b", [], 4) == ["b", "a", "also", "a (3)"]


def test_method_table_counts_unparseable_answers_and_agreement():
    """The notes under a workload's table: unparseable LLM-Yes/No answers, and the parsed ones' agreement with
    Judge.score's verdicts (hand-counted: answers True, None, False against scores 0.4, -1, 2)."""
    results = {"score": bench.MethodResult("score", scores={0: 0.4, 1: -1.0, 2: 2.0}, rates=[3.0]),
               "generate": bench.MethodResult("generate", verdicts={0: True, 1: None, 2: False}, rates=[1.0])}
    table = bench.format_table(bench.WorkloadResult("mrpc", "3 pairs", 3, results))
    assert table.endswith("\n\nLLM-Yes/No: 1 of 3 answers unparseable; agreement of parsed answers with Judge.score verdicts 50%.")


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
    result = bench.run_workload(tiny_judge, workload, methods=bench.METHODS, rounds=1, sample_every=1, generate_batch_size=2,
                                indirect_max_new_tokens=4)
    assert set(result.results) == set(bench.METHODS)
    # INDIRECT ran on the pairs in their order, source and hypothesis in their places
    indirect = tiny_judge.score("para-indirect", source=sources[::-1], hypothesis=hypotheses[::-1], max_new_tokens=4, use_cache=False)
    assert [result.results["indirect"].scores[i] for i in (1, 0)] == indirect
    for method in result.results.values():
        assert method.pairs == 2 and method.seconds > 0 and method.peak_rss_mb > 0
    assert set(result.results["generate"].texts) == {0, 1}
    # the seeds' two-pass method (float32 model loss over ~10^3 tiny-tokenizer tokens) and Judge.score agree
    assert result.max_diff() <= 1e-2
    table = bench.format_table(result)
    assert "(1) seed reference" in table and "(3) Judge.score" in table
    assert any("max |(3) - (1)|" in line for line in bench.agreement_lines([result]))
    assert "INDIRECT cost" in table


def test_bench_runs_on_built_in_pairs_in_a_fresh_clone_and_says_where_mrpc_comes_from(tmp_path, monkeypatch, capsys):
    """Without --data and without PARAPHRASUS beside the checkout, the sections read the package's 120 pairs (the default
    judge's held-out set, read here independently of the bench) and say where the MRPC pairs they would rather use are."""
    import argparse

    from pluie_reward.judges import default_adapter_dir
    from pluie_reward.tools.bench import cli as bench_cli

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PARAPHRASUS_DIR", raising=False)
    args = argparse.Namespace(data=None, json=None, workloads=["mrpc", "grpo"], pairs=64, sources=8, per_source=8)
    workloads = bench_cli._workload_list(args)
    said = capsys.readouterr().err
    assert "120 built-in pairs" in said and "--data" in said and "github.com/impresso/paraphrasus" in said, said
    rows = [json.loads(line) for line in (default_adapter_dir() / "scores.jsonl").read_text(encoding="utf-8").splitlines()]
    assert workloads[0].sources == [r["source"] for r in rows[:64]] and workloads[0].hypotheses == [r["hypothesis"] for r in rows[:64]]
    assert workloads[0].description == "64 built-in pairs" and len(workloads[1]) == 64


def test_bench_command_is_registered_and_reports_bad_input(tmp_path, capsys):
    code = main(["bench", "methods", "--data", str(tmp_path / "missing.json")])
    assert code == 2
    assert "pass --data" in capsys.readouterr().err
    (tmp_path / "pairs.json").write_text('{"1": {"sentence1": "a", "sentence2": "b"}}')
    assert main(["bench", "methods", "--data", str(tmp_path / "pairs.json"), "--workloads", "mrpc"]) == 2  # too few pairs
    assert "needs 64" in capsys.readouterr().err


# engines, server load, GRPO share: argument checks and the arithmetic (no engine, server or trainer started)
import pytest  # noqa: E402

from pluie_reward.tools.bench import engines as bench_engines, grpo_share, server_load  # noqa: E402


@pytest.mark.parametrize("argv, message", [
    (["engines", "--engines", "vllm,transformers"], "list transformers first"),
    (["engines", "--engines", "transformers,sglang"], "--engines: choose a comma-separated list from transformers, vllm"),
    (["engines", "--engines", "transformers,transformers"], "without repeats"),
    (["engines", "--engines", ","], "--engines: choose a comma-separated list"),
    (["engines", "--engine", "vllm"], "pluie-reward bench engines"),
    (["methods", "--engine", "vllm"], "pluie-reward bench engines"),
    (["generative", "--engine", "vllm"], "pluie-reward bench engines"),
    (["generative", "--adapter", "x"], "serves --model on vLLM (no --adapter)"),
    (["generative", "--workloads", "mrpc,stsb"], "--workloads: choose a comma-separated list from mrpc, grpo"),
    (["methods", "--workloads", "mrpc,stsb"], "--workloads: choose a comma-separated list from mrpc, grpo"),
    (["methods", "--methods", ""], "--methods: choose a comma-separated list"),
    (["methods", "--methods", "score,indirectt"], "--methods: choose a comma-separated list from"),
    (["methods", "--indirect-max-new-tokens", "0"], "--indirect-max-new-tokens"),
    (["methods", "--threads", "0"], "--threads: must be a whole number >= 1"),
    (["server", "--clients", "65"], "between 1 and 64"),
    (["server", "--clients", "-1"], "--clients: must be a whole number >= 1"),
    (["server", "--clients", "64", "--requests", "20"], "keep it <= 1000"),
    (["server", "--clients", "2", "--items", "0"], "--items: must be a whole number >= 1"),
    (["grpo", "--placements", "shared,remote"], "--placements: choose a comma-separated list from shared, separate, vllm"),
    (["grpo", "--model", "x"], "unrecognized arguments: --model"),  # it trains the embedded demo model with its own judges
    (["gpu", "--out", "x", "--models", "gpt-5"], "--models: choose a comma-separated list from"),
])
def test_bench_options_are_checked_before_anything_loads(argv, message, tmp_path, capsys, monkeypatch):
    from pluie_reward import Judge

    def forbidden(*args, **kwargs):
        raise AssertionError("a judge was loaded before the options were checked")

    monkeypatch.setattr(Judge, "load", classmethod(forbidden))
    # a missing data file would be reported after the options: the option's message comes first
    data = [] if argv[0] in ("grpo", "gpu") else ["--data", str(tmp_path / "missing.json")]
    code = main(["bench", *argv, *data])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err, err


def test_every_method_refuses_a_template_without_two_fields(tiny_judge):
    """rev has three fields (original, instruction, hypothesis): the methods, the INDIRECT method, the seeds'
    reference and the engine comparison each refuse it, naming the template and its fields."""
    from pluie_reward.tools.shared import UsageError

    workload = bench.Workload("mrpc", ["s1"], ["h1"])
    has = "'rev' has ('original', 'instruction', 'hypothesis')."
    with pytest.raises(UsageError, match=r"^the benchmark needs a two-field \(source, hypothesis\) template; " + re.escape(has)):
        bench.run_workload(tiny_judge, workload, template="rev", methods=("score",), rounds=1)
    with pytest.raises(UsageError, match=r"^the INDIRECT method needs a two-field template; " + re.escape(has)):
        bench.run_workload(tiny_judge, workload, methods=("indirect",), rounds=1, indirect_template="rev")
    with pytest.raises(UsageError, match=re.escape(has)):
        bench.reference_scores(tiny_judge, "rev", ["s1"], ["h1"])
    with pytest.raises(UsageError, match=re.escape(has)):
        bench_engines.compare_engines({"transformers": tiny_judge}, workload, template="rev", rounds=1)


def test_bench_sections_parse_with_their_defaults():
    import argparse

    from pluie_reward.tools.bench.cli import configure

    parser = argparse.ArgumentParser()
    configure(parser)
    args = parser.parse_args(["engines", "--engines", "transformers, vllm", "--workloads", "grpo"])
    assert (args.engines, args.workloads, args.rounds) == (["transformers", "vllm"], ["grpo"], 3)
    args = parser.parse_args(["methods"])
    assert (args.workloads, args.methods) == (["mrpc", "grpo"], ["reference", "generate", "score", "score-cold"])
    args = parser.parse_args(["server", "--clients", "3"])
    assert (args.engines, args.clients, args.requests, args.items) == (["transformers"], 3, 4, 8)
    args = parser.parse_args(["grpo", "--steps", "2"])
    assert (args.placements, args.steps) == (["shared", "separate"], 2)
    args = parser.parse_args(["server", "--data", "m.json", "--json", "p.json"])
    assert (args.model, args.template, str(args.data), str(args.json)) == (None, "para-fs", "m.json", "p.json")
    args = parser.parse_args(["generative"])
    assert (args.workloads, args.rounds, args.vllm_max_model_len, args.data) == (["mrpc", "grpo"], 3, 4096, None)
    args = parser.parse_args(["gpu", "--out", "x"])
    assert (args.models, args.device, args.budget) == (["qwen2.5-7b", "llama-3-8b"], "cuda", 420.0)
    with pytest.raises(SystemExit):
        parser.parse_args([])  # a section is required


def test_server_load_latency_percentiles_are_linear_interpolations():
    # by hand: sorted [0.07, 0.31, 0.5, 1.2, 2.5, 3.3, 9.0]; quantile q at position 6q between its neighbours
    latencies = [0.31, 2.5, 0.07, 1.2, 9.0, 3.3, 0.5]
    load = server_load.ServerLoad("transformers", clients=1, requests=7, items=8, wall_seconds=7.0, latencies=latencies)
    assert load.p50 == 1.2 and load.p99 == pytest.approx(3.3 + 0.94 * (9.0 - 3.3), abs=1e-10)  # p99 at position 5.94
    load = server_load.ServerLoad("transformers", clients=2, requests=2, items=8, wall_seconds=4.0, latencies=[1.0, 2.0, 3.0, 4.0])
    assert load.items_per_second == 8.0 and load.p50 == 2.5 and load.p99 == pytest.approx(3.97, abs=1e-10)
    assert math.isnan(server_load.ServerLoad("vllm", 1, 1, 1).p99)  # nothing answered


class _FixedJudge:
    """Returns fixed scores; counts clear_cache and score calls."""

    def __init__(self, scores, log):
        self.scores, self.log, self.name = scores, log, "fixed"

    def bind(self, template):
        from pluie_reward import load_template

        return type("Bound", (), {"template": load_template(template)})()

    def clear_cache(self):
        self.log.append(("clear", id(self)))

    def score(self, template, source, hypothesis):
        self.log.append(("score", id(self), len(source)))
        return self.scores[: len(source)] if len(source) > 1 else [0.0]


def test_engine_comparison_reports_the_largest_difference_and_rotates_the_order():
    log = []
    a = _FixedJudge([1.0, -2.0, 3.0], log)
    b = _FixedJudge([1.0004, -2.0, 2.9985], log)
    workload = bench.Workload("mrpc", ["s1", "s2", "s3"], ["h1", "h2", "h3"])
    result = bench_engines.compare_engines({"transformers": a, "vllm": b}, workload, rounds=2)
    assert result.max_diff("vllm") == pytest.approx(0.0015)
    assert len(result.rates["transformers"]) == len(result.rates["vllm"]) == 2
    timed = [entry[1] for entry in log if entry[0] == "score" and entry[2] == 3]
    assert timed == [id(a), id(b), id(b), id(a)]  # round 2 starts with the other engine
    for k, entry in enumerate(log):  # every timed call right after clearing that judge's caches and one warm-up item
        if entry[0] == "score" and entry[2] == 3:
            assert log[k - 2] == ("clear", entry[1]) and log[k - 1] == ("score", entry[1], 1)
    table = bench_engines.format_engine_table([result])
    assert "| mrpc | vllm |" in table and "1.5e-03" in table and "OUTSIDE the tolerance" in table


def test_engines_close_the_other_engines_judge_after_the_comparison_or_its_failure(tmp_path, monkeypatch, capsys, tiny_judge):
    """`bench engines`: the vLLM judge (a stand-in here) is closed once the comparison is done, and when it fails."""
    import json

    from pluie_reward.tools.bench import cli as bench_cli

    data = tmp_path / "pairs.json"
    data.write_text(json.dumps({str(i): {"sentence1": f"s{i}", "sentence2": f"h{i}"} for i in range(2)}))
    closed, loaded = [], []

    class OtherJudge:
        def close(self):
            closed.append(self)

    def load_vllm(model, dtype, **options):
        loaded.append((model, dtype, options))
        return OtherJudge()

    def compare(judges, workload, template, rounds, log):
        assert list(judges) == ["transformers", "vllm"] and len(closed) == len(loaded) - 1  # open while compared
        if fail:
            raise RuntimeError("the comparison broke")
        return bench_engines.EngineComparison("mrpc", "2 MRPC pairs", 2, rates={"transformers": [1.0], "vllm": [2.0]},
                                              scores={"transformers": [0.5, -0.5], "vllm": [0.5, -0.5]})

    monkeypatch.setattr(bench_cli, "judge_from_args", lambda args: tiny_judge)
    monkeypatch.setattr(bench_cli, "load_vllm_judge", load_vllm)
    monkeypatch.setattr(bench_cli, "compare_engines", compare)
    argv = ["bench", "engines", "--data", str(data), "--workloads", "mrpc", "--pairs", "2"]
    fail = False
    assert main(argv) == 0 and len(closed) == 1
    assert "| mrpc | vllm | 2.00 | 2.00 | 2.00 | 0.0e+00 |" in capsys.readouterr().out
    fail = True
    with pytest.raises(RuntimeError, match="the comparison broke"):
        main(argv)
    assert len(closed) == 2 and loaded == [(None, "float32", {"max_model_len": 4096})] * 2


def test_timed_reward_passes_arguments_and_adds_up_time():
    seen = {}

    def reward(completions, log_metric=None, **columns):
        seen.update(columns, log_metric=log_metric)
        return [float(len(c)) for c in completions]

    reward.__name__ = "pluie"
    timed = grpo_share.TimedReward(reward)
    assert timed(completions=["ab", "c"], source=["x", "y"], log_metric=print) == [2.0, 1.0]
    assert timed.__name__ == "pluie" and timed.calls == 1 and timed.seconds > 0
    assert seen == {"source": ["x", "y"], "log_metric": print}


def test_grpo_share_is_not_silent_while_a_child_trains(monkeypatch, capsys):
    """The child's output is captured: while it trains, a line with the time elapsed every HEARTBEAT_S, per placement."""
    import time

    from pluie_reward.tools import shared

    monkeypatch.setattr(shared, "HEARTBEAT_S", 0.3)
    monkeypatch.setattr(grpo_share, "in_fresh_process", lambda function, placement, *a: time.sleep(1.6) or {"placement": placement})
    assert grpo_share.grpo_share(["shared", "separate"], steps=2) == [{"placement": "shared"}, {"placement": "separate"}]
    lines = capsys.readouterr().err.splitlines()
    for placement in ("shared", "separate"):
        beats = [line for line in lines if line.startswith(f"bench grpo: judge {placement}, 2 GRPO steps in a fresh process")]
        assert len(beats) >= 3 and re.search(r": [12] s$", beats[-1]), lines  # the time elapsed, once past a second
    assert not capsys.readouterr().err  # no line after the children ended


@pytest.mark.slow
def test_server_load_starts_a_server_and_times_every_request():
    """The bench's server load on the transformers engine: a real `pluie-reward serve` subprocess
    on 127.0.0.1 (embedded judge), 2 clients x 2 requests of 2 distinct pairs, then stopped."""
    sources, hypotheses, _ = mrpc_pairs(12)
    load = server_load.server_load("transformers", list(zip(sources, hypotheses)), clients=2, requests=2, items=2)
    assert load.errors == 0 and len(load.latencies) == 4  # the warm-up request is not timed
    assert load.wall_seconds >= max(load.latencies) > 0 and load.start_seconds > 0
    assert load.items_per_second == pytest.approx(8 / load.wall_seconds)


def test_default_data_path_finds_the_data_as_the_evaluation_does(tmp_path, monkeypatch):
    from pluie_reward.tools.bench.run import default_data_path

    folder = tmp_path / "shared" / "data" / "paraphrasus"
    folder.mkdir(parents=True)
    (folder / "ms-mrpc.json").write_text("{}")
    monkeypatch.delenv("PARAPHRASUS_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    assert default_data_path() == Path("shared/data/paraphrasus/ms-mrpc.json")
    (tmp_path / "checkout").mkdir()
    monkeypatch.chdir(tmp_path / "checkout")  # the checkout, with ../shared beside it
    assert default_data_path().resolve() == (folder / "ms-mrpc.json").resolve()
    monkeypatch.chdir(folder)
    assert default_data_path() is None
    monkeypatch.setenv("PARAPHRASUS_DIR", str(folder))
    assert default_data_path() == folder / "ms-mrpc.json"


def test_server_section_writes_its_loads_through_the_bench_json_writer(tmp_path, monkeypatch):
    """`bench server --json`: the header, then the loads as a list (fields, items/s, p50, p99), written by the
    sections' one writer; a load larger than the data file's pairs is refused after reading it."""
    import json

    from pluie_reward.tools.bench import cli as bench_cli

    data = tmp_path / "pairs.json"
    data.write_text(json.dumps({str(i): {"sentence1": f"s{i}", "sentence2": f"h{i}"} for i in range(30)}))
    seen = {}

    def fake_load(engine, pairs, clients, requests, items, **kwargs):  # no server: one load with known numbers
        seen.update(pairs=pairs, clients=clients)
        return server_load.ServerLoad(engine, clients, requests, items, start_seconds=3.0, wall_seconds=2.0, latencies=[1.0, 3.0])

    monkeypatch.setattr(bench_cli, "server_load", fake_load)
    out = tmp_path / "server.json"
    assert main(["bench", "server", "--clients", "2", "--requests", "1", "--data", str(data), "--json", str(out)]) == 0
    written = json.loads(out.read_text())
    assert written["section"] == "server" and set(written) == {"section", "started", "machine", "server"}
    # by hand: 2 answered requests x 8 items in 2 s; p50 and p99 of [1, 3] by linear interpolation
    assert written["server"] == [{"engine": "transformers", "clients": 2, "requests": 1, "items": 8, "start_seconds": 3.0,
                                  "wall_seconds": 2.0, "latencies": [1.0, 3.0], "errors": 0, "items_per_second": 8.0,
                                  "p50": 2.0, "p99": 2.98}]
    assert seen["clients"] == 2 and seen["pairs"][:2] == [("s0", "h0"), ("s1", "h1")] and len(seen["pairs"]) == 30
    assert main(["bench", "server", "--clients", "4", "--data", str(data)]) == 2  # (4 x 4 + 1) x 8 = 136 pairs > 30


def test_timed_is_the_median_of_the_timed_calls_after_the_warmup(monkeypatch):
    from pluie_reward.tools.bench import measure

    durations, calls, now = [0.0, 0.6, 0.05, 0.1], [], [100.0]
    monkeypatch.setattr(measure.time, "perf_counter", lambda: now[0])  # a clock that moves only when a call "runs"

    def run():
        now[0] += durations[len(calls)]
        calls.append(len(calls))
        return len(calls)

    seconds, value, peak = measure.timed(None, run, rounds=3, warmup=True)
    assert calls == [0, 1, 2, 3] and value == 4 and peak.cuda_mb is None  # one untimed call, then three timed
    assert seconds == pytest.approx(0.1)  # the median of 0.6, 0.05 and 0.1 s (their mean would be 0.25)


def test_in_fresh_process_returns_the_childs_json_and_reports_its_failure():
    import os

    from pluie_reward.tools.bench.measure import in_fresh_process

    assert in_fresh_process(os.getpid) != os.getpid()  # another process
    assert in_fresh_process(os.path.join, "a", "b") == "a/b"  # arguments through repr, the result through JSON
    with pytest.raises(RuntimeError, match=r"(?s)join\('a', 1\) failed:.*TypeError"):
        in_fresh_process(os.path.join, "a", 1)


def test_grpo_table_reports_each_placements_peak_memory():
    """`bench grpo` reports each placement's peak memory (it replaced `bench placement`): the child's peak RSS, and
    its CUDA max allocated where the child had CUDA ("-" without)."""
    timings = {"steps": 2, "train_seconds": 10.0, "reward_seconds": 1.0, "judge_load_seconds": 0.5, "share": 0.1}
    table = grpo_share.format_grpo_table([{"placement": "shared", **timings, "peak_rss_mb": 1124.4, "cuda_max_mb": None},
                                          {"placement": "separate", **timings, "peak_rss_mb": 1627.0, "cuda_max_mb": 2048.6}])
    header, _, *lines = table.split("\n\n")[1].splitlines()
    assert [c.strip() for c in header.split("|")[-3:-1]] == ["peak RSS MB", "CUDA max MB"]
    assert [[c.strip() for c in line.split("|")[1:-1]] for line in lines] == [
        ["shared", "0.5", "10.0", "5.0", "1.00", "10.0%", "1124", "-"], ["separate", "0.5", "10.0", "5.0", "1.00", "10.0%", "1627", "2049"]]


def test_an_unmeasured_value_prints_as_not_measured_in_every_table():
    """A NaN (a rate with no run, a speed-up of nothing) prints as the table's not-measured mark, never ``nan``: the
    bench's column tables and the reports' ``number`` format through one cell formatter."""
    from pluie_reward.tools.bench.measure import column_table
    from pluie_reward.tools.report import number

    table = column_table([{"m": "a", "x": float("nan"), "y": None, "z": 0.25}], [("m", "m", None), ("x", "x", ".1f"),
                                                                                 ("y", "y", ".1f"), ("z", "z", ".1f")])
    assert table.splitlines()[-1] == "| a | - | - | 0.2 |"
    assert (number(float("nan")), number(None), number(0.254)) == ("N/A", "N/A", "0.25")
