"""The command line: score from arguments and files, templates, exit codes."""

import json

import pytest

from pluie_reward.tools import cli
from pluie_reward.tools.cli import score as score_cli


@pytest.fixture()
def tiny_cli(monkeypatch, tiny_judge):
    monkeypatch.setattr(score_cli, "judge_from_args", lambda args: tiny_judge)
    return tiny_judge


def test_score_arguments(tiny_cli, capsys):
    assert cli.main(["score", "The cat sleeps.", "A cat is asleep."]) == 0
    record = json.loads(capsys.readouterr().out)
    expected = tiny_cli.score("para-fs", source=["The cat sleeps."], hypothesis=["A cat is asleep."])[0]
    assert record["logratio"] == pytest.approx(expected, abs=1e-5)
    assert record["verdict"] == (expected > 0)


def test_score_arguments_fill_the_fields_of_a_template_with_an_optional_one(tiny_cli, capsys):
    assert cli.main(["score", "-t", "rev", "The cat sleeps.", "Make it formal.", "The cat is asleep."]) == 0
    record = json.loads(capsys.readouterr().out)
    expected = tiny_cli.score("rev", original=["The cat sleeps."], instruction=["Make it formal."],
                              hypothesis=["The cat is asleep."])[0]
    assert record["logratio"] == pytest.approx(expected, abs=1e-5) and "gold" not in record
    assert list(record)[:3] == ["original", "instruction", "hypothesis"]


def test_score_jsonl_and_csv_with_columns(tiny_cli, tmp_path, capsys):
    src = tmp_path / "in.jsonl"
    src.write_text('{"s": "a", "h": "b", "id": 7}\n{"s": "c", "h": "d", "id": 8}\n')
    out = tmp_path / "out.jsonl"
    assert cli.main(["score", "-i", str(src), "--column", "source=s", "--column", "hypothesis=h", "-o", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in rows] == [7, 8] and all("p_yes" in r for r in rows)
    csv_file = tmp_path / "in.csv"
    csv_file.write_text("source,hypothesis\na,b\n")
    assert cli.main(["score", "-i", str(csv_file)]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["logratio"] == pytest.approx(rows[0]["logratio"], abs=1e-5)


def test_bad_input_exit_codes(tiny_cli, tmp_path, capsys):
    assert cli.main(["score", "only-one-value"]) == 2
    assert "takes 2 values" in capsys.readouterr().err
    src = tmp_path / "in.jsonl"
    src.write_text('{"s": "a"}\n')
    assert cli.main(["score", "-i", str(src)]) == 2
    assert "no column(s) ['source', 'hypothesis']" in capsys.readouterr().err
    src.write_text('{"source": "a", "hypothesis": null}\n')
    assert cli.main(["score", "-i", str(src)]) == 2
    assert "in.jsonl line 1: column 'hypothesis' (template field 'hypothesis'): None is not a string" in capsys.readouterr().err
    assert cli.main(["score", "-t", "nope", "a", "b"]) == 2
    assert cli.main(["score", "-i", str(tmp_path / "missing.jsonl")]) == 2


def test_templates_command(capsys):
    assert cli.main(["templates"]) == 0
    out = capsys.readouterr().out
    for name in ["para-direct", "para-fs", "para-fs-fr", "net", "rev"]:
        assert name in out
    assert "optional: gold" in out


def test_chat_template_kwargs_flag(monkeypatch, capsys):
    """--chat-template-kwargs JSON reaches Judge.load; bad JSON, a non-object, a reserved name or a bad date
    exit 2 with a message and no traceback, before any model loads."""
    from pluie_reward import Judge
    from pluie_reward.testing import make_tiny_judge

    seen = []

    def fake_load(cls, model=None, **options):
        seen.append(options.get("chat_template_kwargs"))
        return make_tiny_judge(chat_template_kwargs=options.get("chat_template_kwargs"))

    monkeypatch.setattr(Judge, "load", classmethod(fake_load))
    assert cli.main(["score", "a", "b", "--chat-template-kwargs", '{"enable_thinking": false}']) == 0
    assert seen == [{"enable_thinking": False}] and "logratio" in capsys.readouterr().out
    for bad, message in (('{"enable_thinking": fals', "not valid JSON"), ("[1]", "JSON object"),
                         ('{"tokenize": true}', "cannot set 'tokenize'"), ('{"strftime_now": "May 1st"}', "ISO date")):
        for command in (["score", "a", "b"], ["templates", "--render", "para-fs"]):
            assert cli.main([*command, "--chat-template-kwargs", bad]) == 2
            err = capsys.readouterr().err
            assert message in err and "Traceback" not in err
    assert len(seen) == 1  # no judge loaded for a bad flag


def test_render_with_a_chat_template_that_hides_the_answer_is_a_message(tmp_path, capsys):
    from pluie_reward.testing import make_tiny_tokenizer

    tokenizer = make_tiny_tokenizer()  # its chat template drops the assistant's turns: no answer token to read
    tokenizer.chat_template = "{% for m in messages %}{% if m['role'] != 'assistant' %}{{ m['content'] }}{% endif %}{% endfor %}"
    tokenizer.save_pretrained(tmp_path)
    assert cli.main(["templates", "--render", "para-fs", "--model", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "pluie-reward templates: error: template 'para-fs': the chat template does not render the assistant's answer" in err
    assert "Traceback" not in err
