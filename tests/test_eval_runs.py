"""Evaluation runs on files in the published shapes: the *-PLUIE paper's presets (ParaReval, NEAT,
French paraphrases), A/B scored in one call, scores saved as they come, resume, ``eval report``.

References are computed here: direct ``Judge.score`` calls per condition (A and B in separate
calls) and brute-force metric implementations written in this file."""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from pathlib import Path

import pytest

from pluie_reward.tools import cli
from pluie_reward.tools.evaluation import cli as eval_cli
from pluie_reward.tools.evaluation.presets import FRENCH_PAIRS, mushra_label, paper_table

from conftest import shared_path

DATA = Path(__file__).parent / "data"
PARAREVAL = DATA / "parareval_sample.jsonl"


class Recorder:
    """A judge that records every Judge.score call (and can be told to fail at call number ``stop``)."""

    def __init__(self, judge, stop: int | None = None):
        self.judge, self.stop, self.calls = judge, stop, []
        self.name, self.engine = judge.name, judge.engine

    def score(self, template, **fields):
        if self.stop is not None and len(self.calls) == self.stop:
            raise KeyboardInterrupt
        self.calls.append((template, fields))
        return self.judge.score(template, **fields)

    @property
    def items(self) -> int:
        return sum(len(f["hypothesis"]) for _, f in self.calls)


@pytest.fixture()
def use_judge(monkeypatch):
    def install(judge):
        monkeypatch.setattr(eval_cli, "judge_from_args", lambda args: judge)
        return judge
    return install


# independent reference metrics ------------------------------------------------------------------
def ref_predict(a, b, eps):
    return ["tie" if abs(x - y) <= eps else ("A" if x > y else "B") for x, y in zip(a, b)]


def ref_tie_calibrated(a, b, human):
    best = (-1.0, None)
    for eps in sorted({0.0, *(abs(x - y) for x, y in zip(a, b))}):
        acc = sum(p == h for p, h in zip(ref_predict(a, b, eps), human)) / len(human)
        if acc > best[0]:
            best = (acc, eps)
    return best


def ref_kappa(x, y):
    n = len(x)
    p_o = sum(u == v for u, v in zip(x, y)) / n
    p_e = sum(Counter(x)[k] * Counter(y)[k] for k in set(x) | set(y)) / n**2
    return None if p_e == 1 else (p_o - p_e) / (1 - p_e)


def ref_cramers_v(x, y):
    rows, cols = sorted(set(x)), sorted(set(y))
    if min(len(rows), len(cols)) < 2:
        return None
    n = len(x)
    chi2 = 0.0
    for r in rows:
        for c in cols:
            observed = sum(1 for u, v in zip(x, y) if u == r and v == c)
            expected = x.count(r) * y.count(c) / n
            chi2 += (observed - expected) ** 2 / expected
    return math.sqrt(chi2 / (n * (min(len(rows), len(cols)) - 1)))


def _rows():
    return [json.loads(line) for line in PARAREVAL.read_text().splitlines()]


# ParaReval -------------------------------------------------------------------------------------
def test_parareval_preset_computes_table2_rows_from_the_published_shape(tiny_judge, use_judge, tmp_path, capsys):
    judge = use_judge(Recorder(tiny_judge))
    out = tmp_path / "pr"
    assert cli.main(["eval", "parareval", str(PARAREVAL), "-o", str(out), "--chunk-size", "4", "--no-progress"]) == 0
    printed = capsys.readouterr().out
    rows = _rows()
    O = [r["original_paragraph"] for r in rows]
    I = [r["instruction"] for r in rows]
    G = [r["reference_paragraph"] for r in rows]
    A = [r["model_A_paragraph"] for r in rows]
    B = [r["model_B_paragraph"] for r in rows]
    human = [{"a": "A", "b": "B", "both": "tie", "none": "tie"}[r["eval_annotation"]["preference"].lower()] for r in rows]
    direct = {
        "Rev-PLUIE": [tiny_judge.score("rev", original=O, instruction=I, hypothesis=c, use_cache=False) for c in (A, B)],
        "Rev-PLUIE w.g.": [tiny_judge.score("rev", original=O, instruction=I, gold=G, hypothesis=c, use_cache=False) for c in (A, B)],
        "Para-PLUIE": [tiny_judge.score("para-fs", source=O, hypothesis=c, use_cache=False) for c in (A, B)],
    }
    saved = json.loads((out / "results.json").read_text())
    assert saved["metrics"]["Rev-PLUIE"]["human_counts"] == dict(Counter(human))
    for name, (a, b) in direct.items():
        assert saved["scores"][name]["A"] == pytest.approx(a, abs=1e-4) and saved["scores"][name]["B"] == pytest.approx(b, abs=1e-4)
        m = saved["metrics"][name]
        acc, eps = ref_tie_calibrated(a, b, human)
        assert m["pairwise_accuracy"] == pytest.approx(acc) and m["epsilon"] == pytest.approx(eps, abs=1e-4)
        predicted = ref_predict(a, b, eps)
        assert m["cohens_kappa"] == pytest.approx(ref_kappa(human, predicted))
        assert m["cramers_v"] == pytest.approx(ref_cramers_v(human, predicted))
    # the scores differ between conditions: the gold turn and the template change the prompt
    assert direct["Rev-PLUIE"][0] != pytest.approx(direct["Rev-PLUIE w.g."][0], abs=1e-3)
    # the output says which fields were used, and prints the paper's rows beside
    assert "Rev-PLUIE w.g.: template rev; original ← original_paragraph, instruction ← instruction, gold ← reference_paragraph" in printed
    assert "Para-PLUIE: template para-fs; source ← original_paragraph" in printed
    assert "human choice ← column 'eval_annotation.preference' (Both and None count as ties)" in printed
    assert "| Rev-PLUIE | Phi-4 14B (paper) | 0.61 | 0.61 | 0.31 | 0.32 | 0.32 | 0.33 |" in printed
    assert "| Rev-PLUIE | Llama 3 70B (paper) | 0.61 | 0.62 | 0.31 | 0.32 | 0.32 | 0.34 |" in printed
    assert "| Para-PLUIE | Llama 3 70B (paper) | 0.52 |  | 0.20 |  | 0.17 |  |" in printed


def test_a_and_b_of_an_item_are_scored_in_the_same_call(tiny_judge, use_judge, tmp_path):
    judge = use_judge(Recorder(tiny_judge))
    assert cli.main(["eval", "parareval", str(PARAREVAL), "--chunk-size", "4", "--baselines", "none", "--no-progress"]) == 0
    rows = _rows()
    assert len(judge.calls) == 6  # 2 chunks x 3 conditions
    template, fields = judge.calls[0]
    assert template == "rev" and "gold" not in fields
    assert fields["hypothesis"] == [c for r in rows[:4] for c in (r["model_A_paragraph"], r["model_B_paragraph"])]
    assert fields["original"] == [r["original_paragraph"] for r in rows[:4] for _ in range(2)]
    assert judge.calls[1][1]["gold"] == [r["reference_paragraph"] for r in rows[:4] for _ in range(2)]
    assert judge.calls[2][0] == "para-fs" and set(judge.calls[2][1]) == {"source", "hypothesis"}


def test_generic_preference_reads_nested_columns_and_says_when_gold_is_used(tiny_judge, use_judge, tmp_path, capsys):
    use_judge(tiny_judge)
    rows = [{"original": r["original_paragraph"], "instruction": r["instruction"], "gold": r["reference_paragraph"],
             "a": r["model_A_paragraph"], "b": r["model_B_paragraph"], "eval": r["eval_annotation"]} for r in _rows()]
    data = tmp_path / "rev.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    base = ["eval", "preference", "-t", "rev", "-i", str(data), "--human-column", "eval.preference", "--no-progress",
            "--baselines", "none"]
    assert cli.main([*base, "-o", str(tmp_path / "with")]) == 0
    assert "optional field 'gold' read from column 'gold'" in capsys.readouterr().out
    assert cli.main([*base, "--column", "gold=", "-o", str(tmp_path / "without")]) == 0
    assert "optional field 'gold'" not in capsys.readouterr().out
    with_gold = json.loads((tmp_path / "with" / "results.json").read_text())["scores"]["PLUIE"]["A"]
    without = json.loads((tmp_path / "without" / "results.json").read_text())["scores"]["PLUIE"]["A"]
    O, I, G, A = ([r[k] for r in rows] for k in ("original", "instruction", "gold", "a"))
    assert with_gold == pytest.approx(tiny_judge.score("rev", original=O, instruction=I, gold=G, hypothesis=A), abs=1e-4)
    assert without == pytest.approx(tiny_judge.score("rev", original=O, instruction=I, hypothesis=A), abs=1e-4)


# saving, resuming, reporting -------------------------------------------------------------------
def test_interrupted_run_resumes_and_report_recomputes_without_the_judge(tiny_judge, use_judge, tmp_path, capsys, monkeypatch):
    argv = ["eval", "parareval", str(PARAREVAL), "--chunk-size", "2", "--no-progress"]
    use_judge(Recorder(tiny_judge, stop=4))  # stops in the second chunk (3 calls per chunk)
    assert cli.main([*argv, "-o", str(tmp_path / "run")]) == 130
    assert "interrupted; the scores computed so far are saved" in capsys.readouterr().err
    lines = (tmp_path / "run" / "scores.jsonl").read_text().splitlines()
    assert [json.loads(line)["i"] for line in lines] == [0, 1]  # the first chunk was saved
    capsys.readouterr()
    # the report of the partial run says so, and needs no judge
    monkeypatch.setattr(eval_cli, "judge_from_args", lambda args: pytest.fail("report loaded a judge"))
    assert cli.main(["eval", "report", str(tmp_path / "run")]) == 0
    assert "PARTIAL RUN: 2 of 6 items scored so far" in capsys.readouterr().out
    # resuming scores only the 4 missing items
    resumed = use_judge(Recorder(tiny_judge))
    assert cli.main([*argv, "-o", str(tmp_path / "run")]) == 0
    assert resumed.items == 3 * 4 * 2  # 3 conditions x 4 items x (A, B)
    fresh = use_judge(Recorder(tiny_judge))
    assert cli.main([*argv, "-o", str(tmp_path / "fresh")]) == 0
    assert fresh.items == 3 * 6 * 2
    first = json.loads((tmp_path / "run" / "results.json").read_text())
    second = json.loads((tmp_path / "fresh" / "results.json").read_text())
    for name in first["metrics"]:
        for key in ("pairwise_accuracy", "epsilon", "cramers_v", "cohens_kappa"):
            assert first["metrics"][name][key] == pytest.approx(second["metrics"][name][key], abs=1e-6)
    capsys.readouterr()
    monkeypatch.setattr(eval_cli, "judge_from_args", lambda args: pytest.fail("report loaded a judge"))
    assert cli.main(["eval", "report", str(tmp_path / "fresh")]) == 0
    assert capsys.readouterr().out.split("\n\nwrote")[0] == (tmp_path / "fresh" / "results.md").read_text().strip()


@pytest.mark.parametrize("damage", [
    lambda lines: "\n".join(lines[:4]) + "\n" + lines[4][:25],  # killed while writing line 5: it is dropped
    lambda lines: "\n".join(lines[:4]),  # killed between line 4 and its newline: the newline is added
], ids=["half-written last line", "last line without its newline"])
def test_resume_writes_one_line_per_item_after_an_interruption(damage, tiny_judge, use_judge, tmp_path):
    argv = ["eval", "parareval", str(PARAREVAL), "--chunk-size", "3", "--no-progress", "-o", str(tmp_path / "run")]
    use_judge(Recorder(tiny_judge))
    assert cli.main(argv) == 0
    scores = tmp_path / "run" / "scores.jsonl"
    scores.write_text(damage(scores.read_text().splitlines()))
    again = use_judge(Recorder(tiny_judge))
    assert cli.main(argv) == 0
    assert again.items == 3 * 2 * 2  # items 5 and 6 again
    assert [json.loads(line)["i"] for line in scores.read_text().splitlines()] == [0, 1, 2, 3, 4, 5]


def test_a_damaged_line_in_the_saved_scores_is_refused_and_kept(tiny_judge, use_judge, tmp_path, capsys):
    """A bad line before the last of scores.jsonl is an edited file, not an interruption: exit 2, the file untouched."""
    argv = ["eval", "parareval", str(PARAREVAL), "--chunk-size", "3", "--no-progress", "-o", str(tmp_path / "run")]
    use_judge(tiny_judge)
    assert cli.main(argv) == 0
    scores = tmp_path / "run" / "scores.jsonl"
    lines = scores.read_text().splitlines(keepends=True)
    damaged = "".join(lines[:2]) + "{not json\n" + "".join(lines[3:])
    scores.write_text(damaged)
    capsys.readouterr()
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "scores.jsonl: line 3 is not valid JSON; the file was edited or damaged: pass --overwrite" in err and "Traceback" not in err
    assert scores.read_text() == damaged
    assert cli.main(["eval", "report", str(tmp_path / "run")]) == 2  # report reads it too: the same refusal, no traceback
    err = capsys.readouterr().err
    assert "pluie-reward eval: error: " in err and "scores.jsonl: line 3 is not valid JSON" in err and "Traceback" not in err


def test_a_folder_of_another_run_is_refused_unless_overwrite(tiny_judge, use_judge, tmp_path, capsys):
    use_judge(tiny_judge)
    data = tmp_path / "pairs.jsonl"
    data.write_text('{"source": "a", "hypothesis": "b", "label": 1}\n{"source": "c", "hypothesis": "d", "label": 0}\n')
    base = ["eval", "classification", "-i", str(data), "-o", str(tmp_path / "out"), "--no-progress"]
    assert cli.main(base) == 0
    assert cli.main([*base, "-t", "para-direct"]) == 2
    assert "holds the scores of another run (different conditions)" in capsys.readouterr().err
    data.write_text('{"source": "a", "hypothesis": "CHANGED", "label": 1}\n{"source": "c", "hypothesis": "d", "label": 0}\n')
    assert cli.main(base) == 2
    assert "item 1 (pairs.jsonl line 1) was scored from different inputs" in capsys.readouterr().err
    assert cli.main([*base, "--overwrite"]) == 0


def test_chat_template_kwargs_are_saved_with_the_run(use_judge, tmp_path, capsys):
    """The keywords the judge renders with are part of the run's settings: saved in run.json, and a folder
    scored with other keywords is refused (its scores were read from other prompts)."""
    from pluie_reward.testing import make_tiny_judge

    data = tmp_path / "pairs.jsonl"
    data.write_text('{"source": "a", "hypothesis": "b", "label": 1}\n{"source": "c", "hypothesis": "d", "label": 0}\n')
    base = ["eval", "classification", "-i", str(data), "-o", str(tmp_path / "out"), "--no-progress"]
    use_judge(make_tiny_judge(chat_template_kwargs={"enable_thinking": False}))
    assert cli.main(base) == 0
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert run["config"]["chat_template_kwargs"] == run["meta"]["chat_template_kwargs"] == {"PLUIE": {"enable_thinking": False}}
    use_judge(make_tiny_judge(chat_template_kwargs={"enable_thinking": True}))
    assert cli.main(base) == 2
    assert "different chat_template_kwargs" in capsys.readouterr().err


def test_limit_scores_the_first_items(tiny_judge, use_judge, tmp_path):
    judge = use_judge(Recorder(tiny_judge))
    assert cli.main(["eval", "parareval", str(PARAREVAL), "--limit", "2", "--no-progress", "-o", str(tmp_path / "o")]) == 0
    assert judge.items == 3 * 2 * 2
    assert json.loads((tmp_path / "o" / "results.json").read_text())["n"] == 2


# NEAT and French paraphrases ---------------------------------------------------------------------
def test_net_preset_binarises_mushra_and_prints_table1(tiny_judge, use_judge, tmp_path, capsys):
    import csv

    use_judge(tiny_judge)
    assert cli.main(["eval", "net", str(DATA / "neat_sample.csv"), "--no-progress", "-o", str(tmp_path / "net")]) == 0
    printed = capsys.readouterr().out
    rows = list(csv.DictReader((DATA / "neat_sample.csv").open()))
    labels = [r["llama_mushra"] in ("Good", "Excellent") or (r["llama_mushra"][0].isdigit() and float(r["llama_mushra"]) >= 60) for r in rows]
    saved = json.loads((tmp_path / "net" / "results.json").read_text())
    assert saved["labels"] == labels == [True, True, False, True, False, False]
    nile, llama = [r["nile"] for r in rows], [r["llama"] for r in rows]
    assert saved["scores"]["Net-PLUIE"] == pytest.approx(tiny_judge.score("net", source=nile, hypothesis=llama), abs=1e-4)
    assert saved["scores"]["Para-PLUIE"] == pytest.approx(tiny_judge.score("para-fs", source=nile, hypothesis=llama), abs=1e-4)
    assert "| Net-PLUIE | Phi-4 14B (paper) | as published | -3.14 | 0.81 | 0.95 | 0.78 | 0.85 |" in printed
    # the Mistral translations with --column
    assert cli.main(["eval", "net", str(DATA / "neat_sample.csv"), "--column", "translation=mistral", "--column",
                     "rating=mistral_mushra", "--no-progress", "--baselines", "none"]) == 0
    assert "6 pairs, 3 positive" in capsys.readouterr().out
    with pytest.raises(ValueError, match="not a MUSHRA rating"):
        mushra_label("great")


def test_french_preset_builds_the_six_pairs_of_appendix_b(tiny_judge, use_judge, tmp_path, capsys):
    import csv

    use_judge(tiny_judge)
    assert cli.main(["eval", "fr-paraphrase", str(DATA / "fr_paraphrase_sample.csv"), "--no-progress", "-o", str(tmp_path / "fr")]) == 0
    printed = capsys.readouterr().out
    saved = json.loads((tmp_path / "fr" / "results.json").read_text())
    rows = list(csv.DictReader((DATA / "fr_paraphrase_sample.csv").open()))
    # rows 1-2: 6 pairs each (2 paraphrases); row 3 has no S(P(s)): (s, S(s)), (s, P(s)), (P(s), S(s)) only
    assert saved["n"] == 15 and saved["positives"] == 5
    first = rows[0]
    s1 = [first[a] for a, b, _ in FRENCH_PAIRS]
    s2 = [first[b] for a, b, _ in FRENCH_PAIRS]
    assert saved["labels"][:6] == [True, True, False, False, False, False]
    assert saved["scores"]["Fr-PLUIE"][:6] == pytest.approx(tiny_judge.score("para-fs-fr", source=s1, hypothesis=s2), abs=1e-4)
    assert "3 pair(s) skipped" in printed and "| Fr-PLUIE | Phi-4 14B (paper) | as published | -7.63 | 0.71 | 0.77 | 0.54 | 0.63 |" in printed
    # --limit counts pairs, not rows: 8 = the 6 pairs of row 1 and the first 2 of row 2
    assert cli.main(["eval", "fr-paraphrase", str(DATA / "fr_paraphrase_sample.csv"), "--no-progress", "--limit", "8",
                     "--baselines", "none", "-o", str(tmp_path / "fr8")]) == 0
    limited = json.loads((tmp_path / "fr8" / "results.json").read_text())
    assert limited["n"] == 8 and limited["labels"] == [True, True, False, False, False, False, True, True]


# the paper's numbers ---------------------------------------------------------------------------
def _seed_rows(header: str, caption: str) -> dict[str, list[str]]:
    text = shared_path("seeds/star-pluie_2026.txt").read_text()
    block = text[text.index(header) : text.index(caption)]
    out = {}
    for line in block.splitlines()[2:]:
        cells = [re.sub(r"<[^>]+>", "", c).replace(" w.g.", "").strip() for c in line.split("\t")]
        if cells and cells[0]:
            out[cells[0]] = [c for c in cells[1:] if c]
    return out


def test_stored_paper_rows_match_the_seed():
    judges = {"Phi-4 14B": "Phi", "Llama 3 70B": "Llama", None: ""}
    table1 = _seed_rows("Task Metric\tParaphrase Classification", "Table 1:")
    for key, offset, star in (("table1/fr-paraphrase", 0, "Fr-PLUIE"), ("table1/net", 1, "Net-PLUIE")):
        for row in paper_table(key)["rows"]:
            name = f"{'*-PLUIE' if row['metric'] == star else row['metric']} {judges[row['judge']]}".strip()
            numbers = [row[k] for k in ("threshold", "accuracy", "recall", "precision", "f1")]
            seed = [float(x) for x in table1[name]]
            width = 5 if row["threshold"] is not None else 4
            mine = [x for x in numbers if x is not None]
            assert mine == seed[offset * width : offset * width + width], (key, name)
    table2 = _seed_rows("Task Metric\tNile Translation\t\t\tScientific", "Table 2:")
    for key, star in (("table2/net", "Net-PLUIE"), ("table2/parareval", "Rev-PLUIE")):
        for row in paper_table(key)["rows"]:
            name = f"{'*-PLUIE' if row['metric'] == star else row['metric']} {judges[row['judge']]}".strip()
            seed = [None if x == "N/A" else float(x) for x in table2[name]]
            values = [row["pairwise_accuracy"], row["cramers_v"], row["cohens_kappa"]]
            if key == "table2/net":
                assert values == seed[:3], name
            elif row.get("with_gold"):
                wg = row["with_gold"]
                assert [values[0], wg["pairwise_accuracy"], values[1], wg["cramers_v"], values[2], wg["cohens_kappa"]] == seed[3:], name
            else:
                assert values == seed[3:], name


def test_presets_load_from_data_with_every_name_field_and_value():
    """The presets read from data/presets.json are the ones the code wrote out before they became data."""
    from pluie_reward.tools.evaluation.presets import PRESETS, Preset, PresetCondition, mushra_label

    want = {
        "parareval": Preset(
            name="parareval",
            task="preference",
            description="ParaReval (Jourdan et al., 2025): which of two revisions of a scientific paragraph the annotator "
                        "prefers; the *-PLUIE paper's Table 2, scientific text revision",
            roles={"original": "original_paragraph", "instruction": "instruction", "gold": "reference_paragraph",
                   "a": "model_A_paragraph", "b": "model_B_paragraph", "human": "eval_annotation.preference"},
            role_help={"original": "the paragraph before revision", "instruction": "the revision instruction",
                       "gold": "the authors' own revision (Rev-PLUIE w.g. and the baselines' reference)",
                       "a": "revision A", "b": "revision B", "human": "the preferred revision: A, B, Both or None (ties)"},
            conditions=(
                PresetCondition("Rev-PLUIE", "rev", {"original": "original", "instruction": "instruction"}),
                PresetCondition("Rev-PLUIE w.g.", "rev", {"original": "original", "instruction": "instruction", "gold": "gold"},
                                row="Rev-PLUIE", variant="w.g."),
                PresetCondition("Para-PLUIE", "para-fs", {"source": "original"}),
            ),
            reference_role="gold",
            paper_table="table2/parareval",
            paper_metrics=("Rev-PLUIE", "Para-PLUIE"),
        ),
        "net": Preset(
            name="net",
            task="classification",
            description="NEAT (Munson et al., 2025): is an English translation of a Nile network intent acceptable "
                        "(MUSHRA Good/Excellent)? The *-PLUIE paper's Table 1, Nile translation",
            roles={"nile": "nile", "translation": "llama", "rating": "llama_mushra"},
            role_help={"nile": "the Nile intent (sentence A)", "translation": "its English translation (sentence B)",
                       "rating": "the human MUSHRA rating of the translation (Bad..Excellent or 0-100)"},
            conditions=(
                PresetCondition("Net-PLUIE", "net", {"source": "nile", "hypothesis": "translation"}),
                PresetCondition("Para-PLUIE", "para-fs", {"source": "nile", "hypothesis": "translation"}),
            ),
            reference_role="nile",
            paper_table="table1/net",
            paper_metrics=("Net-PLUIE", "Para-PLUIE"),
            label=mushra_label,
            label_rule="MUSHRA rating Good/Excellent (>= 60) is positive",
        ),
        "fr-paraphrase": Preset(
            name="fr-paraphrase",
            task="classification",
            description="French paronym/synonym substitutions (Tytgat et al., 2024) as the *-PLUIE paper's 6 pairs per "
                        "sentence (appendix B); Table 1, paraphrase classification",
            roles={"original": "original", "paronym": "paronym", "synonym": "synonym", "synonym_of_paronym": "synonym_of_paronym"},
            role_help={"original": "the sentence s", "paronym": "P(s): its central word replaced by a paronym",
                       "synonym": "S(s): replaced by a synonym", "synonym_of_paronym": "S(P(s)): a synonym of the paronym"},
            conditions=(
                PresetCondition("Fr-PLUIE", "para-fs-fr", {"source": "sentence1", "hypothesis": "sentence2"}),
                PresetCondition("Para-PLUIE", "para-fs", {"source": "sentence1", "hypothesis": "sentence2"}),
            ),
            reference_role="sentence1",
            paper_table="table1/fr-paraphrase",
            paper_metrics=("Fr-PLUIE", "Para-PLUIE"),
            label_rule="(s, S(s)) and (P(s), S(P(s))) are paraphrases; (s, P(s)), (s, S(P(s))), (P(s), S(s)) and "
                       "(S(s), S(P(s))) are not",
        ),
    }
    assert list(PRESETS) == list(want)
    for name, preset in want.items():
        assert PRESETS[name] == preset, name
        assert all(isinstance(c, PresetCondition) for c in PRESETS[name].conditions)
        assert isinstance(PRESETS[name].conditions, tuple) and isinstance(PRESETS[name].paper_metrics, tuple)


def test_eval_and_report_say_what_they_wrote(tiny_judge, use_judge, tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    use_judge(tiny_judge)
    assert cli.main(["eval", "parareval", str(PARAREVAL), "--baselines", "none", "--no-progress", "-o", str(out)]) == 0
    assert capsys.readouterr().out.endswith(f"\n\nwrote {out / 'results.json'} and results.md; scores in {out / 'scores.jsonl'}\n")
    monkeypatch.setattr(eval_cli, "judge_from_args", lambda args: pytest.fail("report loaded a judge"))
    assert cli.main(["eval", "report", str(out)]) == 0
    assert capsys.readouterr().out.endswith(f"\n\nwrote {out / 'results.json'} and results.md\n")


def test_saved_item_fingerprints_are_those_of_earlier_runs(tiny_judge, tmp_path):
    """Resuming a folder written before needs the same ``h``: the label, then per condition its fields in
    sorted order (hypothesis, source), then the (reference, hypothesis) the baselines compare."""
    from pluie_reward.tools.evaluation.store import fingerprint
    from pluie_reward.tools.evaluation.tasks import evaluate_classification

    S, H, labels = ["The cat sleeps.", "Prices rose."], ["A cat is asleep.", "Prices fell."], [True, False]
    evaluate_classification(tiny_judge, {"source": S, "hypothesis": H}, labels, baselines="none", progress=False,
                            output_dir=tmp_path / "run")
    saved = [json.loads(line)["h"] for line in (tmp_path / "run" / "scores.jsonl").read_text().splitlines()]
    assert saved == [fingerprint(y, [[h, s], [s, h]]) for s, h, y in zip(S, H, labels)]


def test_paraphrasus_sts_bins_show_every_sts_pair_and_the_sts_h_labels(tiny_judge, tmp_path):
    from pluie_reward.tools.evaluation.paraphrasus import load_pairs, run_paraphrasus
    from pluie_reward.tools.evaluation.plots import plot_facts

    data = shared_path("data/paraphrasus")
    run_paraphrasus(tiny_judge, data, datasets=["STS-H", "STS", "MRPC"], limit=6, progress=False, plots=True, output_dir=tmp_path)
    facts = plot_facts(tmp_path / "plots" / "sts_bins.png")
    pairs = load_pairs(data, datasets=["STS-H", "STS"], limit=6)
    human = [0] * 5
    for p in pairs["STS-H"]:  # bins 0-1, 1-2, 2-3, 3-4, 4-5 (5 included)
        human[min(int(p.sts), 4)] += 1
    assert [n for _, n, _ in facts["STS-H annotators: paraphrase"]] == human
    judged = {(p.file, p.pair_id): p.sts for p in pairs["STS-H"] + pairs["STS"]}  # a pair in both counts once
    assert sum(n for _, n, _ in facts["judge: predicted paraphrase"]) == len(judged)


def test_report_of_a_paraphrasus_run_draws_its_plots(tiny_judge, tmp_path):
    from pluie_reward.tools.evaluation.paraphrasus import run_paraphrasus
    from pluie_reward.tools.evaluation.tasks import report_folder

    run_paraphrasus(tiny_judge, shared_path("data/paraphrasus"), datasets=["MRPC"], limit=4, progress=False,
                    output_dir=tmp_path / "run")
    results = report_folder(tmp_path / "run", plots=True)
    names = sorted(Path(p).name for p in results["plots"])
    assert names == ["MRPC_histogram.png", "MRPC_thresholds.png", "edit_distance.png", "error_rates.png"] or \
        names == ["MRPC_histogram.png", "edit_distance.png", "error_rates.png"]  # one label only: no threshold curves
    assert all(Path(p).is_file() for p in results["plots"])


def test_mushra_label_refuses_booleans():
    for bad in (True, False, None):
        with pytest.raises(ValueError, match="is not a MUSHRA rating"):
            mushra_label(bad)


@pytest.mark.parametrize("task", ["classification", "preference"])
def test_results_of_a_run_with_no_scored_item_say_so(task):
    """A run stopped before its first chunk has no line: its results say that, not a metric's complaint."""
    from pluie_reward.tools.evaluation.tasks import classification_results, preference_results

    meta = {"task": task, "conditions": [{"name": "PLUIE", "template": "para-fs", "kind": "yes_no"}], "baselines": []}
    results = classification_results if task == "classification" else preference_results
    with pytest.raises(ValueError, match=r"^no scored items yet\.$"):
        results(meta, [])


@pytest.mark.parametrize("specs, message", [
    (["translation"], "--column expects ROLE=COLUMN, got 'translation'."),
    (["=mistral"], "--column expects ROLE=COLUMN with a role name, got '=mistral'."),
    (["judge=mistral"], "--column: 'judge' is not a role of the net preset; roles: ['nile', 'translation', 'rating']."),
    (["translation="], "--column translation=: give a column name."),
    (["translation=mistral", "translation=llama"], "--column translation is given twice (translation=mistral and translation=llama)"),
])
def test_a_preset_refuses_a_bad_column_option_in_one_line(specs, message, capsys):
    argv = ["eval", "net", str(DATA / "neat_sample.csv"), "--no-progress"]
    assert cli.main(argv + [arg for spec in specs for arg in ("--column", spec)]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
