"""Reading a run back (pluie_reward.tools.runs, ``pluie-reward plot-run``): trainer_state.json and the
callback's pluie/step-*.jsonl tables, checked against values written by hand."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("matplotlib")

from pluie_reward.tools.cli import main  # noqa: E402
from pluie_reward.tools.runs import plot_run, read_run, rolling_mean, summary  # noqa: E402

# what GRPOTrainer logs (trl 1.x key names) and PluieCallback's evaluations, by hand
HISTORY = [
    {"step": s, "reward": -2.0 + 0.1 * s, "reward_std": 0.5, "rewards/pluie/mean": -2.5 + 0.1 * s, "rewards/pluie/std": 0.4,
     "rewards/novelty/mean": 0.5, "rewards/novelty/std": 0.1, "pluie/accept_rate": 0.05 * s, "loss": 0.01}
    for s in range(1, 11)
] + [
    {"step": 5, "eval_pluie_mean": -1.5, "eval_pluie_p10": -2.0, "eval_pluie_p90": -1.0, "eval_pluie_accept_rate": 0.25},
    {"step": 10, "eval_pluie_mean": -1.0, "eval_pluie_p10": -1.5, "eval_pluie_p90": -0.5, "eval_pluie_accept_rate": 0.5},
    {"step": 10, "train_runtime": 12.0, "train_loss": 0.01},
]


def write_run(directory, in_checkpoint=False):
    state_dir = directory / "checkpoint-10" if in_checkpoint else directory
    state_dir.mkdir(parents=True)
    (state_dir / "trainer_state.json").write_text(json.dumps({"log_history": HISTORY, "global_step": 10}))
    (directory / "pluie").mkdir()
    for step, scores in ((5, [-2.0, -1.0]), (10, [-1.5, -0.5])):
        rows = [{"step": step, "index": i, "generation": "x", "score": s, "verdict": s > 0} for i, s in enumerate(scores)]
        (directory / "pluie" / f"step-{step:06d}.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return directory


def test_read_run_series_tables_and_summary(tmp_path):
    run = read_run(write_run(tmp_path / "run", in_checkpoint=True))
    assert run.state_file.parent.name == "checkpoint-10"
    steps, values = run.series("rewards/pluie/mean")
    assert steps == list(range(1, 11)) and values == pytest.approx([-2.4 + 0.1 * i for i in range(10)])
    assert run.series("eval_pluie_mean") == ([5, 10], [-1.5, -1.0])
    assert run.reward_names() == ["pluie", "novelty"]
    assert sorted(run.tables) == [5, 10] and [r["score"] for r in run.tables[10]] == [-1.5, -0.5]
    lines = summary(run)
    # 10 points: the first and last tenth are one step each
    assert "reward: -1.900 -> -1.000 (mean of steps 1-1 vs 10-10, 10 points)" in lines
    assert "pluie/accept_rate: 0.050 -> 0.500 (mean of steps 1-1 vs 10-10, 10 points)" in lines
    assert "eval_pluie_mean: -1.500 -> -1.000 (mean of steps 5-5 vs 10-10, 2 points)" in lines
    assert lines[-1] == "pluie tables (mean score): step 5 -1.500 -> step 10 -1.000 (2 tables)"
    assert rolling_mean([1.0, 3.0, 5.0, 7.0], 3) == pytest.approx([1.0, 2.0, 3.0, 5.0])
    assert rolling_mean([], 3) == []


def test_keys_are_the_numeric_ones_in_first_seen_order():
    from pathlib import Path

    from pluie_reward.tools.runs import RunLog

    history = [{"step": 1, "loss": 1.0, "done": True, "note": "x"}, {"step": 2, "reward": 0.5, "loss": 0.5, "lr": 2}]
    assert RunLog(Path("."), history).keys() == ["loss", "reward", "lr"]  # not step, not a bool, not a string


def test_plot_run_and_cli(tmp_path, capsys):
    directory = write_run(tmp_path / "run")
    path = plot_run(directory)
    assert path == directory / "run_curves.png" and path.stat().st_size > 10_000
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    out = tmp_path / "elsewhere" / "curves.png"
    assert main(["plot-run", str(directory), "-o", str(out), "--window", "2"]) == 0
    printed = capsys.readouterr().out
    assert out.is_file() and f"wrote {out}" in printed and "rewards/novelty/mean: 0.500 -> 0.500" in printed
    lines = printed.splitlines()  # one line per curve, then the file written
    assert lines[-1] == f"wrote {out}" and "reward: -1.900 -> -1.000 (mean of steps 1-1 vs 10-10, 10 points)" in lines
    assert len(lines) == 8, lines  # reward, 2 reward functions, 2 accept rates, eval_pluie_mean, the tables, "wrote"


def test_plot_run_bad_input_is_a_usage_error(tmp_path, capsys):
    assert main(["plot-run", str(tmp_path / "missing")]) == 2
    assert "is not a directory" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["plot-run", str(tmp_path / "empty")]) == 2
    assert "trainer.save_state()" in capsys.readouterr().err
    assert main(["plot-run", str(write_run(tmp_path / "run")), "--window", "0"]) == 2


def test_plot_run_on_a_real_trainer_run(tiny_judge, tmp_path):
    """A real Trainer + PluieCallback run: what it writes is what plot_run reads."""
    from datasets import Dataset
    from transformers import Trainer, TrainingArguments

    from pluie_reward.integrations.callbacks import PluieCallback
    from pluie_reward.testing import make_tiny_causal_lm, make_tiny_tokenizer

    tok = make_tiny_tokenizer()
    sources = ["The cat sleeps.", "The dog barks.", "Rain fell."]
    rows = [tok(s)["input_ids"][:5] for s in sources]
    data = Dataset.from_dict({"input_ids": [r + [tok.pad_token_id] * (5 - len(r)) for r in rows],
                              "labels": [r + [-100] * (5 - len(r)) for r in rows]})
    items = [{"prompt": f"Paraphrase: {s}", "source": s} for s in sources]
    args = TrainingArguments(str(tmp_path), max_steps=2, eval_strategy="steps", eval_steps=1, logging_steps=1,
                             per_device_train_batch_size=3, report_to=[], use_cpu=True, disable_tqdm=True, save_strategy="no")
    trainer = Trainer(model=make_tiny_causal_lm(tok, seed=1), args=args, train_dataset=data, eval_dataset=data,
                      processing_class=tok)
    PluieCallback(tiny_judge, "para-fs", items, max_new_tokens=3, trainer=trainer)
    trainer.train()
    trainer.save_state()
    run = read_run(tmp_path)
    logged = [e["eval_pluie_mean"] for e in trainer.state.log_history if "eval_pluie_mean" in e]
    assert run.series("eval_pluie_mean")[1] == pytest.approx(logged) and sorted(run.tables) == [1, 2]
    for step, rows in run.tables.items():
        assert sum(r["score"] for r in rows) / 3 == pytest.approx(run.series("eval_pluie_mean")[1][step - 1], abs=1e-6)
    assert plot_run(run).is_file()


def test_the_latest_numbered_checkpoint_is_read_not_the_last_by_name(tmp_path):
    for name in ("checkpoint-9", "checkpoint-10", "checkpoint-best"):  # by name, checkpoint-9 and -best sort after -10
        (tmp_path / name).mkdir()
        (tmp_path / name / "trainer_state.json").write_text(json.dumps({"log_history": [{"step": 1, "loss": len(name)}]}))
    assert read_run(tmp_path).state_file == tmp_path / "checkpoint-10" / "trainer_state.json"


def test_plot_run_without_matplotlib_names_the_extra(tmp_path, capsys, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # an import of it fails as when it is not installed
    assert main(["plot-run", str(write_run(tmp_path / "run"))]) == 2
    err = capsys.readouterr().err
    assert "needs matplotlib" in err and 'pip install "pluie-reward[eval]"' in err and "Traceback" not in err


def test_reading_a_run_loads_no_evaluation_module_nor_numpy():
    """plot-run reads JSON: importing the module must not pull the evaluation package (and numpy) in for one helper."""
    import subprocess
    import sys

    code = ("import sys, pluie_reward.tools.runs; "
            "print(sorted(m for m in sys.modules if m == 'numpy' or m.startswith('pluie_reward.tools.evaluation')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
