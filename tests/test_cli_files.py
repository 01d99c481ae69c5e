"""The command line never loses a file: ``score -o`` writes FILE.partial and renames it when done,
refuses its own input, an existing file (without --overwrite) and a second writer, never replaces
input columns, exits 130 on Ctrl-C with how to resume, and ``--resume`` gives the clean run's file.
JSON Lines are read as JSON Lines: every character a field may hold comes back as written."""

from __future__ import annotations

import json
import os

import pytest

from pluie_reward.tools import cli, shared
from pluie_reward.tools.cli import score as score_cli
from pluie_reward.tools.cli.output import OutputFile, partial_path
from pluie_reward.tools.cli.records import read_table
from pluie_reward.tools.evaluation.store import ScoreStore, read_lines
from pluie_reward.tools.shared import UsageError


class NoJudge:
    def __call__(self, args):
        raise AssertionError("the judge was loaded although the command had to be refused first")


@pytest.fixture()
def no_judge(monkeypatch):
    monkeypatch.setattr(score_cli, "judge_from_args", NoJudge())


@pytest.fixture()
def tiny_cli(monkeypatch, tiny_judge):
    monkeypatch.setattr(score_cli, "judge_from_args", lambda args: tiny_judge)
    return tiny_judge


def _rows(n):
    return [{"id": i, "source": f"The cat sleeps on mat {i}.", "hypothesis": f"A cat is asleep ({i})."} for i in range(n)]


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def _refused(argv, capsys, *needles):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    for needle in needles:
        assert needle in err, err
    assert "Traceback" not in err
    return err


# refusals before loading ------------------------------------------------------------------------------
def test_output_equal_to_the_input_is_refused_also_through_links(no_judge, tmp_path, capsys):
    data = _jsonl(tmp_path / "in.jsonl", _rows(3))
    before = data.read_bytes()
    (tmp_path / "sym.jsonl").symlink_to(data)
    os.link(data, tmp_path / "hard.jsonl")
    for out in (data, tmp_path / "sym.jsonl", tmp_path / "hard.jsonl", tmp_path / "." / "in.jsonl"):
        for extra in ([], ["--overwrite"], ["--resume"]):
            _refused(["score", "-i", str(data), "-o", str(out), *extra], capsys, "would destroy the input")
    assert data.read_bytes() == before


def test_an_output_whose_partial_file_is_the_input_is_refused(no_judge, tmp_path, capsys):
    out = tmp_path / "out.jsonl"
    data = _jsonl(tmp_path / "out.jsonl.partial", _rows(2))  # named like the output's partial file
    for extra in ([], ["--resume"]):
        _refused(["score", "-i", str(data), "-o", str(out), *extra], capsys, "would destroy the input")
    assert data.read_text(encoding="utf-8").count("\n") == 2 and not out.exists()


def test_a_writer_leaves_a_partial_file_only_when_it_wrote_something(tmp_path):
    out = tmp_path / "out.jsonl"
    with OutputFile(out):
        pass
    assert not partial_path(out).exists() and not out.exists()
    with OutputFile(out) as writer:  # left without commit: the rows are kept for --resume
        writer.add([{"id": 0}])
    assert partial_path(out).read_text() == '{"id": 0}\n' and not out.exists()


def test_existing_output_needs_overwrite(tiny_cli, tmp_path, capsys):
    data = _jsonl(tmp_path / "in.jsonl", _rows(2))
    out = tmp_path / "out.jsonl"
    out.write_text("precious\n")
    _refused(["score", "-i", str(data), "-o", str(out)], capsys, f"{out} exists", "--overwrite")
    assert out.read_text() == "precious\n"
    assert cli.main(["score", "-i", str(data), "-o", str(out), "--overwrite"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in rows] == [0, 1] and not partial_path(out).exists()


def test_a_second_writer_of_the_same_output_is_refused(tiny_cli, tmp_path, capsys):
    data = _jsonl(tmp_path / "in.jsonl", _rows(2))
    out = tmp_path / "out.jsonl"
    with OutputFile(out) as first:  # another command writing out.jsonl right now
        first.write('{"id": 0}\n')
        first.flush()
        for extra in ([], ["--overwrite"], ["--resume"]):
            _refused(["score", "-i", str(data), "-o", str(out), *extra], capsys, "another command is writing it now")
        first.commit()
    assert out.read_text() == '{"id": 0}\n'


def test_the_lock_is_checked_again_when_the_file_is_opened(tiny_cli, tmp_path, monkeypatch, capsys):
    """Two commands that both passed the early checks: the second to open the file is refused."""
    data = _jsonl(tmp_path / "in.jsonl", _rows(2))
    out = tmp_path / "out.jsonl"
    holder = {}

    def judge_then_race(args):
        holder["other"] = OutputFile(out).__enter__()  # the other command opens it while this one loads
        return tiny_cli

    monkeypatch.setattr(score_cli, "judge_from_args", judge_then_race)
    _refused(["score", "-i", str(data), "-o", str(out)], capsys, "another command is writing it now")
    holder["other"].__exit__(None, None, None)


def test_a_partial_file_renamed_into_place_while_it_was_opened_is_refused(tmp_path, monkeypatch):
    out = tmp_path / "out.jsonl"

    def finished_first(fd):  # the other writer commits between this one's open and its lock
        os.replace(partial_path(out), out)
        return True

    monkeypatch.setattr(shared, "lock_file", finished_first)
    with pytest.raises(UsageError, match="another command is writing it now"):
        OutputFile(out).__enter__()
    assert out.exists() and not partial_path(out).exists()
def test_input_columns_named_like_outputs_are_refused(no_judge, tmp_path, capsys):
    for column in ("verdict", "p_yes", "logratio", "p_calibrated"):
        rows = _rows(2)
        rows[1][column] = "mine"  # in a later row only
        data = _jsonl(tmp_path / "in.jsonl", rows)
        _refused(["score", "-i", str(data)], capsys, f"column(s) ['{column}']", "rename")
    data = _jsonl(tmp_path / "in.jsonl", [{"original": "a", "instruction": "i", "hypothesis": "b", "alternative": "c", "choice": "A"}])
    _refused(["score", "-t", "rev-choice", "-i", str(data)], capsys, "['choice']")


def test_a_result_key_the_column_check_missed_never_replaces_an_input_column(tiny_cli, tmp_path, capsys, monkeypatch):
    """The second guard: if the list of output fields ever misses a key Judge.score returns, the row is refused."""
    monkeypatch.setattr(score_cli, "output_fields", lambda template: ())  # the first guard (_check_columns) sees nothing
    rows = _rows(2)
    rows[1]["verdict"] = "mine"
    data, out = _jsonl(tmp_path / "in.jsonl", rows), tmp_path / "out.jsonl"
    _refused(["score", "-i", str(data), "-o", str(out)], capsys, "in.jsonl line 2", "['verdict'] would be replaced")
    assert not out.exists()


def test_score_keeps_no_scored_line_in_memory(tiny_cli, tmp_path, monkeypatch):
    """Rows go to the output chunk by chunk; score_items is not asked to collect them all (a large file's memory)."""
    calls = []
    real = score_cli.score_items

    def spy(*args, **kwargs):
        out = real(*args, **kwargs)
        calls.append((kwargs.get("keep", True), out))
        return out

    monkeypatch.setattr(score_cli, "score_items", spy)
    data, out = _jsonl(tmp_path / "in.jsonl", _rows(5)), tmp_path / "out.jsonl"
    assert cli.main(["score", "-i", str(data), "-o", str(out), "--chunk-size", "2"]) == 0
    assert calls == [(False, [])] and [json.loads(line)["id"] for line in out.read_text().splitlines()] == [0, 1, 2, 3, 4]


def test_output_into_missing_folders_is_created_and_a_file_in_the_way_refused_first(tiny_cli, tmp_path, capsys, monkeypatch):
    data = _jsonl(tmp_path / "in.jsonl", _rows(2))
    out = tmp_path / "new" / "deeper" / "out.jsonl"
    assert cli.main(["score", "-i", str(data), "-o", str(out)]) == 0
    assert len(out.read_text().splitlines()) == 2
    monkeypatch.setattr(score_cli, "judge_from_args", NoJudge())
    blocker = tmp_path / "file.txt"
    blocker.write_text("x")
    _refused(["score", "-i", str(data), "-o", str(blocker / "sub" / "out.jsonl")], capsys, "is a file")


def test_repeated_column_and_nan_threshold_are_refused(no_judge, tmp_path, capsys):
    data = _jsonl(tmp_path / "in.jsonl", _rows(2))
    _refused(["score", "-i", str(data), "--column", "source=id", "--column", "source=source"], capsys,
             "--column source is given twice")
    for value in ("nan", "inf", "-inf"):
        _refused(["score", "-i", str(data), f"--threshold={value}"], capsys, "--threshold", "finite")


def test_render_with_a_missing_model_is_a_usage_error(capsys, tmp_path):
    _refused(["templates", "--render", "para-fs", "--model", str(tmp_path / "missing")], capsys,
             f"--model {tmp_path / 'missing'}: no such file or folder")


# interruption and resume ---------------------------------------------------------------------------------
class StopAfter:
    """A judge whose score() raises ``error`` on call number ``calls`` (1-based)."""

    def __init__(self, judge, calls, error=KeyboardInterrupt):
        self.judge, self.calls, self.error, self.seen = judge, calls, error, 0
        self.engine, self.name = judge.engine, judge.name

    def score(self, *args, **kwargs):
        self.seen += 1
        if self.seen == self.calls:
            raise self.error()
        return self.judge.score(*args, **kwargs)


def test_ctrl_c_keeps_the_old_file_and_resume_equals_a_clean_run(tiny_judge, tmp_path, monkeypatch, capsys):
    rows = _rows(11)
    data = _jsonl(tmp_path / "in.jsonl", rows)
    clean = tmp_path / "clean.jsonl"
    monkeypatch.setattr(score_cli, "judge_from_args", lambda args: tiny_judge)
    assert cli.main(["score", "-i", str(data), "-o", str(clean), "--chunk-size", "3"]) == 0
    out = tmp_path / "out.jsonl"
    out.write_text("the old output\n")
    monkeypatch.setattr(score_cli, "judge_from_args", lambda args: StopAfter(tiny_judge, calls=3))
    assert cli.main(["score", "-i", str(data), "-o", str(out), "--chunk-size", "3", "--overwrite"]) == 130
    err = capsys.readouterr().err
    assert "Traceback" not in err
    line = next(x for x in err.splitlines() if "interrupted" in x)
    assert "6 of 11" in line and str(partial_path(out)) in line and "--resume" in line
    assert out.read_text() == "the old output\n"  # untouched
    assert len(partial_path(out).read_text().splitlines()) == 6
    # an interruption while a line was being written: the cut line is written again on resume
    with partial_path(out).open("a") as handle:
        handle.write('{"id": 6, "source": "The cat')
    monkeypatch.setattr(score_cli, "judge_from_args", lambda args: tiny_judge)
    _refused(["score", "-i", str(data), "-o", str(out), "--chunk-size", "3"], capsys, "--resume", "--overwrite")
    assert cli.main(["score", "-i", str(data), "-o", str(out), "--chunk-size", "3", "--resume"]) == 0
    assert out.read_text() == clean.read_text() and not partial_path(out).exists()
    assert cli.main(["score", "-i", str(data), "-o", str(out), "--chunk-size", "3", "--resume"]) == 0  # complete: kept
    assert out.read_text() == clean.read_text() and not partial_path(out).exists()
    # and the clean run's scores are the judge's (an independent call)
    scored = [json.loads(x) for x in out.read_text().splitlines()]
    expected = tiny_judge.score("para-fs", source=[r["source"] for r in rows], hypothesis=[r["hypothesis"] for r in rows])
    assert [r["id"] for r in scored] == list(range(11))
    assert [r["logratio"] for r in scored] == pytest.approx(expected, abs=1e-5)
    assert [r["verdict"] for r in scored] == [x > 0 for x in expected]


def test_resume_after_a_last_record_without_its_newline_writes_one_line_per_row(tiny_cli, tmp_path):
    data = _jsonl(tmp_path / "in.jsonl", _rows(12))
    clean, out = tmp_path / "clean.jsonl", tmp_path / "out.jsonl"
    assert cli.main(["score", "-i", str(data), "-o", str(clean), "--chunk-size", "4"]) == 0
    # an interruption after the last complete record of a partial file, before its newline
    partial_path(out).write_text("".join(clean.read_text().splitlines(keepends=True)[:5]).rstrip("\n"))
    assert cli.main(["score", "-i", str(data), "-o", str(out), "--chunk-size", "4", "--resume"]) == 0
    assert out.read_text() == clean.read_text() and len(out.read_text().splitlines()) == 12


def test_resume_over_a_damaged_line_is_refused_and_the_partial_file_is_kept(tiny_cli, tmp_path, capsys):
    """A bad line before the last is an edited or damaged file, not an interruption: exit 2 with what to do, and the
    partial file is left as it was (nothing truncated)."""
    data = _jsonl(tmp_path / "in.jsonl", _rows(6))
    clean, out = tmp_path / "clean.jsonl", tmp_path / "out.jsonl"
    assert cli.main(["score", "-i", str(data), "-o", str(clean), "--chunk-size", "2"]) == 0
    lines = clean.read_text().splitlines(keepends=True)
    damaged = lines[0] + lines[1] + '{"id": 2, "sou\n' + lines[3]
    partial_path(out).write_text(damaged)
    _refused(["score", "-i", str(data), "-o", str(out), "--chunk-size", "2", "--resume"], capsys,
             "line 3 is not valid JSON; the file was edited or damaged: pass --overwrite")
    assert partial_path(out).read_text() == damaged and not out.exists()


def test_resume_with_other_settings_or_another_input_is_refused(tiny_judge, tmp_path, monkeypatch, capsys):
    data = _jsonl(tmp_path / "in.jsonl", _rows(7))
    out = tmp_path / "out.jsonl"
    monkeypatch.setattr(score_cli, "judge_from_args", lambda args: StopAfter(tiny_judge, calls=2))
    assert cli.main(["score", "-i", str(data), "-o", str(out), "--chunk-size", "2"]) == 130
    kept = partial_path(out).read_text()
    monkeypatch.setattr(score_cli, "judge_from_args", lambda args: tiny_judge)
    _refused(["score", "-i", str(data), "-o", str(out), "--chunk-size", "2", "--resume", "--threshold", "50"], capsys,
             "line 1 was scored with other settings")
    changed = _rows(7)
    changed[1]["hypothesis"] = "Something else."
    _jsonl(data, changed)
    _refused(["score", "-i", str(data), "-o", str(out), "--chunk-size", "2", "--resume"], capsys,
             "line 2 does not hold in.jsonl line 2", "--overwrite")
    assert partial_path(out).read_text() == kept and not out.exists()


def test_an_error_in_a_later_chunk_keeps_the_rows_before_it(tiny_judge, tmp_path, monkeypatch, capsys):
    data = _jsonl(tmp_path / "in.jsonl", _rows(9))
    out = tmp_path / "out.jsonl"
    monkeypatch.setattr(score_cli, "judge_from_args", lambda args: StopAfter(tiny_judge, calls=3, error=RuntimeError))
    with pytest.raises(RuntimeError):
        cli.main(["score", "-i", str(data), "-o", str(out), "--chunk-size", "3"])
    assert "6 of 9 item(s)" in capsys.readouterr().err and not out.exists()
    monkeypatch.setattr(score_cli, "judge_from_args", lambda args: tiny_judge)
    assert cli.main(["score", "-i", str(data), "-o", str(out), "--chunk-size", "3", "--resume"]) == 0
    assert [json.loads(x)["id"] for x in out.read_text().splitlines()] == list(range(9))


def test_ctrl_c_on_standard_output_exits_130_in_one_line(tiny_judge, tmp_path, monkeypatch, capsys):
    data = _jsonl(tmp_path / "in.jsonl", _rows(4))
    monkeypatch.setattr(score_cli, "judge_from_args", lambda args: StopAfter(tiny_judge, calls=2))
    assert cli.main(["score", "-i", str(data), "--chunk-size", "2"]) == 130
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == 2 and "Traceback" not in captured.err
    assert "interrupted; 2 of 4 item(s) were written to standard output" in captured.err


def test_standard_output_closed_by_the_reader_stops_quietly_with_status_141(tmp_path):
    """``score | head -1``: the Unix behaviour of a writer whose reader left (SIGPIPE: 128 + 13), with no
    message (the reader chose to stop) and never exit 0, which would claim every item was written."""
    import subprocess
    import sys

    rows = [{**row, "note": "x" * 30_000} for row in _rows(12)]  # 360 kB: more than a pipe holds, so the pipe breaks
    data = _jsonl(tmp_path / "in.jsonl", rows)
    script = ("import sys; from pluie_reward.testing import make_tiny_judge; from pluie_reward.tools import cli; "
              "from pluie_reward.tools.cli import score; judge = make_tiny_judge(); "
              "score.judge_from_args = lambda args: judge; sys.exit(cli.main(sys.argv[1:]))")
    proc = subprocess.Popen([sys.executable, "-c", script, "score", "-i", str(data), "--chunk-size", "4"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = proc.stdout.readline()
    proc.stdout.close()  # what head -1 does after its line
    err = proc.stderr.read().decode()
    assert proc.wait(120) == 141, err
    assert json.loads(first)["id"] == 0
    assert "Traceback" not in err and "written" not in err and "failed" not in err, err


# JSON Lines ------------------------------------------------------------------------------------------------
# every character class a text field may hold, as json.dumps(ensure_ascii=False) writes it (raw or escaped)
ODD = ["line\u2028separator", "para\u2029separator", "next\x85line", "vertical\x0btab", "form\x0cfeed", "file\x1csep",
       "group\x1dsep", "record\x1esep", "carriage\rreturn", "crlf\r\ninside", "new\nline", "tab\there", "nul\x00byte",
       "emoji 🙂👍🏽", "combining e\u0301", "bom\ufeffinside", "rtl \u202e mark", "quote \" and \\ backslash", "   ", "中文 文本"]


def test_everything_score_writes_it_reads_back(tiny_cli, tmp_path, capsys):
    rows = [{"source": text, "hypothesis": f"h {i}", "note": text} for i, text in enumerate(ODD)]
    data = _jsonl(tmp_path / "in.jsonl", rows)
    out = tmp_path / "out.jsonl"
    assert cli.main(["score", "-i", str(data), "-o", str(out)]) == 0
    back = read_table(out)
    assert back.values("source") == ODD and back.values("note") == ODD and len(back) == len(ODD)
    # the output scored again: its own output is a valid input (output columns dropped)
    again = _jsonl(tmp_path / "again.jsonl", [{k: v for k, v in r.items() if k in ("source", "hypothesis")} for r in back.rows])
    assert cli.main(["score", "-i", str(again)]) == 0
    assert [json.loads(x)["source"] for x in capsys.readouterr().out.split("\n") if x] == ODD


def test_csv_text_written_as_jsonl_reads_back(tiny_cli, tmp_path):
    import csv

    src = tmp_path / "in.csv"
    with src.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["source", "hypothesis"])
        writer.writerows([[text, "h"] for text in ODD if "\x00" not in text])  # csv cannot hold NUL
    out = tmp_path / "out.jsonl"
    assert cli.main(["score", "-i", str(src), "-o", str(out)]) == 0
    assert read_table(out).values("source") == [t for t in ODD if "\x00" not in t]


def test_jsonl_with_crlf_and_raw_separators_is_read_line_by_line(tmp_path):
    path = tmp_path / "crlf.jsonl"
    path.write_bytes(b"".join(json.dumps({"a": t}, ensure_ascii=False).encode() + b"\r\n" for t in ODD))
    records = read_table(path)
    assert records.values("a") == ODD and records.where(len(ODD) - 1) == f"crlf.jsonl line {len(ODD)}"


def test_the_evaluation_store_reads_back_what_it_saved(tmp_path):
    with ScoreStore(tmp_path, {"task": "t"}, {}) as store:
        store.add([{"i": i, "h": "x", "row": text} for i, text in enumerate(ODD)])
    lines, good = read_lines(tmp_path / "scores.jsonl")
    assert [line["row"] for line in lines] == ODD and good == (tmp_path / "scores.jsonl").stat().st_size


class LengthJudge:
    """A judge whose scores a reader can compute: logratio = len(hypothesis) - len(source)."""

    name, engine = "length", None

    def score(self, template, details=True, threshold=0.0, truncate=True, source=(), hypothesis=()):
        out = []
        for s, h in zip(source, hypothesis):
            logratio = float(len(h) - len(s))
            out.append({"logratio": logratio, "p_yes": 0.5, "verdict": logratio > threshold, "p_calibrated": None})
        return out


# what score --output wrote before the writers were one (literally: the input row, then the judge's record, as
# json.dumps(..., ensure_ascii=False) writes them), cut inside its third line by an interruption
SCORED_BEFORE = ('{"id": 0, "source": "Le chat dort.", "hypothesis": "Un chat dort ☕", "logratio": 1.0, "p_yes": 0.5, '
                 '"verdict": true, "p_calibrated": null}\n'
                 '{"id": 1, "source": "Prices rose.", "hypothesis": "Up.", "logratio": -9.0, "p_yes": 0.5, '
                 '"verdict": false, "p_calibrated": null}\n'
                 '{"id": 2, "source": "Ab')
SCORED_AFTER = (SCORED_BEFORE.rsplit("\n", 1)[0] + "\n"
                '{"id": 2, "source": "Ab", "hypothesis": "Abc\u2028d", "logratio": 3.0, "p_yes": 0.5, "verdict": true, '
                '"p_calibrated": null}\n')


def test_score_resumes_a_file_written_before_the_one_writer_byte_for_byte(tmp_path, monkeypatch):
    monkeypatch.setattr(score_cli, "judge_from_args", lambda args: LengthJudge())
    data = _jsonl(tmp_path / "in.jsonl", [{"id": 0, "source": "Le chat dort.", "hypothesis": "Un chat dort ☕"},
                                          {"id": 1, "source": "Prices rose.", "hypothesis": "Up."},
                                          {"id": 2, "source": "Ab", "hypothesis": "Abc\u2028d"}])
    out = tmp_path / "out.jsonl"
    partial_path(out).write_bytes(SCORED_BEFORE.encode())
    assert cli.main(["score", "-i", str(data), "-o", str(out), "--chunk-size", "2", "--resume"]) == 0
    assert out.read_bytes() == SCORED_AFTER.encode() and not partial_path(out).exists()
    clean = tmp_path / "clean.jsonl"  # and a clean run writes the same bytes
    assert cli.main(["score", "-i", str(data), "-o", str(clean), "--chunk-size", "2"]) == 0
    assert clean.read_bytes() == SCORED_AFTER.encode()


def test_a_resumed_run_counts_only_new_rows_on_its_progress_line(tmp_path, monkeypatch, capsys):
    """20 of 100 rows saved, chunks of 8: rows 16-19 are scored again (the chunk 16-23), but the line starts at 20 and
    prints a line per tenth of the work newly reached: not 24 (still the second tenth), then 32, 40, 56...."""
    monkeypatch.setattr(score_cli, "judge_from_args", lambda args: LengthJudge())
    data = _jsonl(tmp_path / "in.jsonl", _rows(100))
    clean, out = tmp_path / "clean.jsonl", tmp_path / "out.jsonl"
    assert cli.main(["score", "-i", str(data), "-o", str(clean), "--chunk-size", "8", "--no-progress"]) == 0
    partial_path(out).write_text("".join(clean.read_text().splitlines(keepends=True)[:20]))
    capsys.readouterr()
    assert cli.main(["score", "-i", str(data), "-o", str(out), "--chunk-size", "8", "--resume"]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("scoring:")]
    assert lines == [f"scoring: {n}/100 items ({n}%)" for n in (32, 40, 56, 64, 72, 80, 96, 100)]
    assert out.read_text() == clean.read_text()


class TooLongJudge(LengthJudge):
    """Refuses a hypothesis longer than 20 characters, as a judge refuses a prompt over its context (item k of its call)."""

    def score(self, template, hypothesis=(), **fields):
        for k, h in enumerate(hypothesis):
            if len(h) > 20:
                raise ValueError(f"item {k}: the prompt is too long")
        return super().score(template, hypothesis=hypothesis, **fields)


def test_a_judge_error_names_the_input_row_and_keeps_the_chunks_before(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(score_cli, "judge_from_args", lambda args: TooLongJudge())
    rows = [{"source": "a", "hypothesis": "short"} for _ in range(6)]
    rows[4]["hypothesis"] = "x" * 21
    data, out = _jsonl(tmp_path / "in.jsonl", rows), tmp_path / "out.jsonl"
    err = _refused(["score", "-i", str(data), "-o", str(out), "--chunk-size", "3", "--no-progress"], capsys)
    assert err.splitlines()[-1] == (f"pluie-reward score: error: in.jsonl line 5: the prompt is too long (3 of 6 item(s), in "
                                    f"input order, are kept in {partial_path(out)} ({out} is untouched); fix it, then run "
                                    "the same command with --resume to score the rest).")


def test_the_evaluation_store_resumes_a_folder_written_before_the_one_writer(tmp_path):
    # run.json and scores.jsonl as an evaluation wrote them; its last record lacks its newline (an interruption)
    (tmp_path / "run.json").write_text('{\n "format": 1,\n "config": {\n  "task": "t"\n },\n "meta": {}\n}\n')
    (tmp_path / "scores.jsonl").write_bytes('{"i": 0, "h": "a", "row": "é", "scores": {"PLUIE": 1.5}}\n'
                                            '{"i": 1, "h": "b", "scores": {"PLUIE": [-0.25, 2.0]}}'.encode())
    with ScoreStore(tmp_path, {"task": "t"}, {}) as store:
        assert store.done(0, "a") == {"i": 0, "h": "a", "row": "é", "scores": {"PLUIE": 1.5}}
        assert store.done(1, "b")["scores"] == {"PLUIE": [-0.25, 2.0]} and store.done(2, "c") is None
        store.add([{"i": 2, "h": "c", "scores": {"PLUIE": 0.5}}])
    assert (tmp_path / "scores.jsonl").read_bytes() == ('{"i": 0, "h": "a", "row": "é", "scores": {"PLUIE": 1.5}}\n'
                                                       '{"i": 1, "h": "b", "scores": {"PLUIE": [-0.25, 2.0]}}\n'
                                                       '{"i": 2, "h": "c", "scores": {"PLUIE": 0.5}}\n').encode()
    (tmp_path / "scores.jsonl").write_bytes(b'{"i": 0, "h": "a", "scores": {}}\n{"i": 1, "h"')  # torn last line
    with ScoreStore(tmp_path, {"task": "t"}, {}) as store:
        assert sorted(store.lines) == [0]
        store.add([{"i": 1, "h": "b", "scores": {}}])
    assert (tmp_path / "scores.jsonl").read_bytes() == b'{"i": 0, "h": "a", "scores": {}}\n{"i": 1, "h": "b", "scores": {}}\n'
    with ScoreStore(tmp_path, {"task": "t"}, {}, overwrite=True) as store:
        assert store.lines == {}
    assert (tmp_path / "scores.jsonl").read_bytes() == b""


def test_run_tables_read_back_what_was_written(tmp_path):
    from pluie_reward.tools.runs import read_run

    (tmp_path / "pluie").mkdir()
    _jsonl(tmp_path / "pluie" / "step-10.jsonl", [{"completion": text, "reward": 0.5} for text in ODD])
    assert [row["completion"] for row in read_run(tmp_path).tables[10]] == ODD


# the other commands that write files ---------------------------------------------------------------------
def test_calibrate_and_probe_refuse_their_input_as_output_before_loading(no_judge, tmp_path, capsys, monkeypatch):
    from pluie_reward.tools.probe import cli as probe_cli

    monkeypatch.setattr(probe_cli, "judge_from_args", NoJudge())
    data = _jsonl(tmp_path / "in.jsonl", [{"source": "a", "hypothesis": "b", "label": 1, "logratio": 0.5}])
    before = data.read_bytes()
    _refused(["calibrate", "-i", str(data), "--score-column", "logratio", "-o", str(data), "--overwrite"], capsys,
             "would destroy the input")
    _refused(["probe", "-i", str(data), "--items", str(data)], capsys, "--items", "would destroy the input")
    assert data.read_bytes() == before


def test_calibrate_writes_its_file_whole(tmp_path, capsys):
    rows = [{"s": x, "label": int(x > 0)} for x in (-3, -2, -1, -0.5, 0.2, 0.5, 1, 2, 3, -0.1, 0.3, 1.5)]
    data = _jsonl(tmp_path / "scores.jsonl", rows)
    target = tmp_path / "cal" / "calibration.json"
    assert cli.main(["calibrate", "-i", str(data), "--score-column", "s", "-o", str(target)]) == 0
    assert json.loads(target.read_text())["a"] > 0 and not partial_path(target).exists()
    _refused(["calibrate", "-i", str(data), "--score-column", "s", "-o", str(target)], capsys, "exists", "--overwrite")


def test_two_evaluations_cannot_write_one_folder(tiny_judge, tmp_path, monkeypatch, capsys):
    from pluie_reward.tools.evaluation import cli as eval_cli

    monkeypatch.setattr(eval_cli, "judge_from_args", lambda args: tiny_judge)
    data = _jsonl(tmp_path / "in.jsonl", [{"source": "a", "hypothesis": "b", "label": 1}, {"source": "c", "hypothesis": "d", "label": 0}])
    folder = tmp_path / "run"
    fds = (lambda: len(os.listdir("/proc/self/fd"))) if os.path.isdir("/proc/self/fd") else (lambda: None)
    before = fds()
    with ScoreStore(folder, {"task": "other"}, {}):  # another evaluation writing there now
        open_files = fds()
        assert before is None or open_files == before + 1  # one lock, the score file's (a folder lock was a second)
        with pytest.raises(ValueError, match=f"another run is writing into this folder now \\(it holds the lock on {folder / 'scores.jsonl'}\\)"):
            ScoreStore(folder, {"task": "other"}, {})
        assert open_files is None or len(os.listdir("/proc/self/fd")) == open_files  # the refused store closed the folder
        _refused(["eval", "classification", "-i", str(data), "-o", str(folder), "--no-progress", "--baselines", "none"],
                 capsys, "another run is writing into this folder")
    assert cli.main(["eval", "classification", "-i", str(data), "-o", str(folder), "--no-progress", "--baselines", "none"]) == 0


SLOW_SCORE = """
import signal, sys, time
from pluie_reward.testing import make_tiny_judge
from pluie_reward.tools.cli import score
from pluie_reward.tools.cli.main import main

judge = make_tiny_judge()

class Slow:  # the tiny judge; after two chunks it waits, so that Ctrl-C comes while scoring however loaded the machine
    engine, name = judge.engine, judge.name
    calls = 0

    def score(self, *args, **kwargs):
        Slow.calls += 1
        if Slow.calls > 2:
            time.sleep(600)
        return judge.score(*args, **kwargs)

score.judge_from_args = lambda args: Slow()
# Ctrl-C at a terminal: a shell without job control (CI scripts, `cmd &`) starts its background jobs with
# SIGINT ignored, and Python keeps an ignored SIGINT, so the signal would never reach this child
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow  # a fresh Python process imports torch (~1 min on a loaded 2-core machine)
def test_a_real_ctrl_c_exits_130_in_one_line_and_resume_completes(tiny_judge, tmp_path, monkeypatch, capsys):
    import signal
    import subprocess
    import sys
    import time

    rows = _rows(40)
    data = _jsonl(tmp_path / "in.jsonl", rows)
    out = tmp_path / "out.jsonl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(__import__("pathlib").Path(__file__).resolve().parents[1]),
                                                         os.environ.get("PYTHONPATH", "")])}
    process = subprocess.Popen([sys.executable, "-c", SLOW_SCORE, "score", "-i", str(data), "-o", str(out), "--chunk-size", "2"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    partial = partial_path(out)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and process.poll() is None:
        if partial.exists() and partial.read_text().count("\n") >= 4:
            break
        time.sleep(0.1)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130, err
    assert "Traceback" not in err
    lines = [x for x in err.splitlines() if "interrupted" in x]
    assert len(lines) == 1 and "--resume" in lines[0] and str(partial) in lines[0], err
    assert not out.exists()
    monkeypatch.setattr(score_cli, "judge_from_args", lambda args: tiny_judge)
    assert cli.main(["score", "-i", str(data), "-o", str(out), "--chunk-size", "2", "--resume"]) == 0
    scored = [json.loads(x) for x in out.read_text().splitlines()]
    expected = tiny_judge.score("para-fs", source=[r["source"] for r in rows], hypothesis=[r["hypothesis"] for r in rows])
    assert [r["id"] for r in scored] == list(range(40))
    assert [r["logratio"] for r in scored] == pytest.approx(expected, abs=1e-5)


def test_the_progress_line_moves_per_chunk_and_its_last_state_is_printed_once(tiny_cli, tmp_path, capsys):
    src = _jsonl(tmp_path / "in.jsonl", _rows(5))
    assert cli.main(["score", "-i", str(src), "--chunk-size", "2", "-t", "para-direct"]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("scoring")]
    # one line per tenth of the work when stderr is not a terminal: after 2, 4 and 5 of 5 items, each once
    assert lines == ["scoring: 2/5 items (40%)", "scoring: 4/5 items (80%)", "scoring: 5/5 items (100%)"]
    assert cli.main(["score", "-i", str(src), "--chunk-size", "2", "-t", "para-direct", "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert "scoring:" not in captured.err and len(captured.out.splitlines()) == 5
