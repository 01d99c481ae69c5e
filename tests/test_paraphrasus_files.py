"""The PARAPHRASUS files as the benchmark's release lays them out (``datasets_no_results/`` beside
``benches/<bench>/results.json``), built here in small: PAWS-X and XNLI are scored when their files are
there, the report names only the datasets really missing, and the peers' figures are read from the
release's own paths as well as from ``results_<peer>.json`` copies."""

from __future__ import annotations

import json

import pytest

from pluie_reward.tools.evaluation.paraphrasus import load_pairs, markdown_report, missing_datasets, run_paraphrasus

# the release's files, three entries each (what each dataset's rule reads)
FILES = {
    "ms-mrpc.json": [("The cat sleeps.", "A cat is asleep.", {"label": True})] * 2 + [("Prices rose.", "Prices fell.", {"label": False})],
    "stsbenchmark-test-sts.json": [("A man plays.", "A man is playing.", {"label": True, "score": 4.5}),
                                   ("A dog runs.", "A cat sleeps.", {"score": 0.5}), ("It rains.", "It is sunny.", {"score": 1.0})],
    "stannlp-snli-pre-hyp.json": [("A boy jumps.", "The boy is asleep.", {})] * 3,
    "stannlp-snli-hyp-pre.json": [("The boy is asleep.", "A boy jumps.", {})] * 3,
    "fb-anli-pre-hyp.json": [("He won.", "He lost.", {})] * 3,
    "fb-anli-hyp-pre.json": [("He lost.", "He won.", {})] * 3,
    "sickr-sts.json": [("A woman cooks.", "A woman reads.", {"score": 2.0})] * 3,
    "amr_true_paraphrases.json": [("She looked it up.", "She looked up it.", {})] * 3,
    "onestop_parallel_all_pairs.json": [("The treaty was ratified.", "The treaty was approved.", {})] * 3,
    "paws-x-test.json": [("Flights from A to B.", "Flights from B to A.", {"label": False}),
                         ("He was born in 1990.", "In 1990 he was born.", {"label": True}), ("Red car.", "Blue car.", {"label": False})],
    "fb-xnli-pre-hyp.json": [("Der Hund bellt.", "Die Katze schläft.", {})] * 3,
    "fb-xnli-hyp-pre.json": [("Die Katze schläft.", "Der Hund bellt.", {})] * 3,
}
PEERS = {"benches/paper/results.json": ("XLM-RoBERTa-EN-ORIG", "15.23%"), "benches/llama3_3_70b/results.json": ("llama_3_3_70b", "23.1%")}


def _release(root, with_optional=True, peers_as="release"):
    data = root / "datasets_no_results"
    data.mkdir(parents=True)
    for name, entries in FILES.items():
        if not with_optional and name in ("paws-x-test.json", "fb-xnli-pre-hyp.json", "fb-xnli-hyp-pre.json"):
            continue
        (data / name).write_text(json.dumps({f"{name}-{i}": {"sentence1": a, "sentence2": b, **extra}
                                             for i, (a, b, extra) in enumerate(entries)}))
    for path, (method, rate) in PEERS.items():
        target = root / path if peers_as == "release" else data / f"results_{'paper' if 'paper' in path else 'llama3'}.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps({"Classify!": {"PAWSX": {method: rate}, "MRPC": {method: "20.0%"}},
                                      "Averages": {method: {"Overall Average": "21.0%"}}}))
    return data


def test_pawsx_and_xnli_are_scored_when_their_files_are_there_and_the_report_says_nothing_is_missing(tiny_judge, tmp_path):
    data = _release(tmp_path / "paraphrasus")
    pairs = load_pairs(tmp_path / "paraphrasus")  # the release itself: its datasets_no_results folder is read
    assert [p.expected for p in pairs["PAWSX"]] == [False, True, False] and len(pairs["XNLI"]) == 6
    assert not any(p.expected for p in pairs["XNLI"]) and {p.file for p in pairs["XNLI"]} == {"fb-xnli-pre-hyp.json", "fb-xnli-hyp-pre.json"}
    results = run_paraphrasus(tiny_judge, data, progress=False, peers="all")
    # independent recomputation of the two new datasets' error rates and of the Classify! mean
    rates = {}
    for name in ("PAWSX", "XNLI", "MRPC", "STS-H"):
        scores = tiny_judge.score("para-fs", source=[p.sentence1 for p in pairs[name]], hypothesis=[p.sentence2 for p in pairs[name]])
        rates[name] = sum((s > 0) != p.expected for s, p in zip(scores, pairs[name])) / len(pairs[name])
        assert results["datasets"][name]["error_rate"] == pytest.approx(rates[name])
    assert results["challenges"]["Classify!"] == pytest.approx((rates["PAWSX"] + rates["MRPC"] + rates["STS-H"]) / 3)
    assert results["not_included"] == [] and missing_datasets(data) == []
    footer = markdown_report(results).splitlines()[-1]
    assert "not in the data folder" not in footer and "| Classify! | PAWSX | 3 |" in markdown_report(results)
    # the peers' figures from the release's own paths
    assert results["peers"]["XLM-RoBERTa-EN-ORIG"]["error_rates"]["PAWSX"] == pytest.approx(0.1523)
    assert results["peers"]["llama_3_3_70b"]["error_rates"]["PAWSX"] == pytest.approx(0.231)


def test_without_their_files_the_report_names_them_and_asking_for_them_says_which_file_is_missing(tiny_judge, tmp_path):
    data = _release(tmp_path / "paraphrasus", with_optional=False, peers_as="copies")
    results = run_paraphrasus(tiny_judge, data, progress=False, datasets=["MRPC", "SNLI"], peers="paper")
    assert results["not_included"] == ["PAWSX", "XNLI"]
    assert markdown_report(results).endswith("(PAWSX, XNLI are not in the data folder).")
    assert results["peers"]["XLM-RoBERTa-EN-ORIG"]["error_rates"] == {"MRPC": pytest.approx(0.2)}  # results_paper.json
    assert set(load_pairs(data)) == {"MRPC", "STS-H", "SNLI", "ANLI", "STS", "SICK", "TRUE", "SIMP"}
    with pytest.raises(ValueError, match="PAWSX: .* lacks paws-x-test.json"):
        load_pairs(data, datasets=["PAWSX"])
    (data / "paws-x-test.json").write_text(json.dumps({"0": {"sentence1": "a", "sentence2": "b", "label": True}}))
    assert missing_datasets(data) == ["XNLI"]
    assert run_paraphrasus(tiny_judge, data, progress=False, datasets=["PAWSX"], peers="none")["not_included"] == ["XNLI"]
