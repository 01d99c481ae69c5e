"""Outputs that are not plain new files: ``score -o`` never renames over a FIFO, a device or a link (a FIFO or a
device is written as a stream, a link to a file is written through, a link to a file a process holds open is
refused); a name too long for ``.partial`` still gets a partial file; a disk that fills up, a full standard
output, a link loop: exit 2 with a message (and ``--resume`` completes the run), never a traceback."""

from __future__ import annotations

import errno
import io
import json
import os
import stat
import subprocess
import sys
import threading

import pytest

from pluie_reward.tools import cli
from pluie_reward.tools.cli import score as score_cli
from pluie_reward.tools.cli.output import partial_path
from pluie_reward.tools.shared import Progress

from test_cli_files import StopAfter, _jsonl, _refused, _rows

# a python -c script running the CLI with the tiny judge (no model download, a few seconds)
SCRIPT = ("import sys; from pluie_reward.testing import make_tiny_judge; from pluie_reward.tools import cli; "
          "from pluie_reward.tools.cli import score; judge = make_tiny_judge(); "
          "score.judge_from_args = lambda args: judge; sys.exit(cli.main(sys.argv[1:]))")


@pytest.fixture()
def tiny_cli(monkeypatch, tiny_judge):
    monkeypatch.setattr(score_cli, "judge_from_args", lambda args: tiny_judge)
    return tiny_judge


def _ids(text):
    return [json.loads(line)["id"] for line in text.splitlines()]


def _clean(tiny_judge, rows):
    """The records an independent Judge.score call gives (what every output must hold)."""
    scores = tiny_judge.score("para-fs", source=[r["source"] for r in rows], hypothesis=[r["hypothesis"] for r in rows])
    return [r["id"] for r in rows], scores


# special files ---------------------------------------------------------------------------------------------
def test_a_fifo_is_written_as_a_stream_and_stays_a_fifo(tiny_cli, tmp_path):
    data = _jsonl(tmp_path / "in.jsonl", _rows(3))
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for extra in (["--overwrite"], []):  # nothing is replaced: --overwrite is not needed
        got = {}
        reader = threading.Thread(target=lambda: got.setdefault("text", fifo.read_text()), daemon=True)
        reader.start()
        assert cli.main(["score", "-i", str(data), "-o", str(fifo), *extra]) == 0
        reader.join(30)
        assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and not partial_path(fifo).exists()
        ids, scores = _clean(tiny_cli, _rows(3))
        lines = [json.loads(x) for x in got["text"].splitlines()]
        assert [r["id"] for r in lines] == ids and [r["logratio"] for r in lines] == pytest.approx(scores, abs=1e-5)


def test_a_character_device_is_written_in_place_and_resume_is_refused(tiny_cli, tmp_path, capsys):
    data = _jsonl(tmp_path / "in.jsonl", _rows(2))
    null = tmp_path / "null"
    try:
        os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # a second /dev/null, made here
    except PermissionError:
        pytest.skip("making a device node needs root")
    assert cli.main(["score", "-i", str(data), "-o", str(null), "--overwrite"]) == 0
    assert stat.S_ISCHR(os.lstat(null).st_mode) and not partial_path(null).exists()
    _refused(["score", "-i", str(data), "-o", str(null), "--resume"], capsys, "a FIFO or a device", "drop --resume")
    assert stat.S_ISCHR(os.lstat(null).st_mode)


def test_a_link_to_a_file_is_written_through_and_stays_a_link(tiny_cli, tmp_path, capsys):
    data = _jsonl(tmp_path / "in.jsonl", _rows(3))
    (tmp_path / "runs").mkdir()
    target = tmp_path / "runs" / "3.jsonl"
    target.write_text("old\n")
    link = tmp_path / "latest.jsonl"
    link.symlink_to(target)
    _refused(["score", "-i", str(data), "-o", str(link)], capsys, "exists", "--overwrite")
    assert cli.main(["score", "-i", str(data), "-o", str(link), "--overwrite"]) == 0
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert _ids(target.read_text()) == [0, 1, 2]
    assert not partial_path(target).exists() and not partial_path(link).exists()
    dangling = tmp_path / "next.jsonl"
    dangling.symlink_to(tmp_path / "runs" / "4.jsonl")  # a link to a file not written yet
    assert cli.main(["score", "-i", str(data), "-o", str(dangling)]) == 0
    assert dangling.is_symlink() and _ids((tmp_path / "runs" / "4.jsonl").read_text()) == [0, 1, 2]


def test_a_link_loop_is_named_as_such(tiny_cli, tmp_path, capsys):
    data = _jsonl(tmp_path / "in.jsonl", _rows(2))
    loop = tmp_path / "loop.jsonl"
    loop.symlink_to(loop)
    _refused(["score", "-i", str(data), "-o", str(loop), "--overwrite"], capsys, "symbolic link loop")
    assert loop.is_symlink()


def _run(args, **kwargs):
    return subprocess.run([sys.executable, "-c", SCRIPT, *args], timeout=300, **kwargs)


def test_a_link_to_standard_output_streams_to_a_pipe_and_is_refused_over_a_file(tmp_path):
    """``-o`` a link to /proc/self/fd/1 (what /dev/stdout is): on a pipe the records reach the reader; redirected
    to a file, renaming over that name would not replace what the shell holds open: refused, the file kept."""
    data = _jsonl(tmp_path / "in.jsonl", _rows(2))
    link = tmp_path / "stdout"
    link.symlink_to("/proc/self/fd/1")
    piped = _run(["score", "-i", str(data), "-o", str(link), "--overwrite"], capture_output=True, text=True)
    assert piped.returncode == 0, piped.stderr
    assert _ids(piped.stdout) == [0, 1] and link.is_symlink() and not partial_path(link).exists()
    shell_file = tmp_path / "shell.txt"
    with shell_file.open("w") as handle:
        handle.write("kept\n")
        handle.flush()
        inode = os.fstat(handle.fileno()).st_ino
        refused = _run(["score", "-i", str(data), "-o", str(link), "--overwrite"], stdout=handle, stderr=subprocess.PIPE, text=True)
    assert refused.returncode == 2 and "leave out --output" in refused.stderr and "Traceback" not in refused.stderr
    assert shell_file.read_text() == "kept\n" and os.stat(shell_file).st_ino == inode and link.is_symlink()


# names too long for .partial -------------------------------------------------------------------------------
def test_a_255_byte_name_gets_a_partial_file_that_fits_and_resume_finds_it(tiny_judge, tmp_path, monkeypatch, capsys):
    data = _jsonl(tmp_path / "in.jsonl", _rows(6))
    out = tmp_path / ("o" * 249 + ".jsonl")  # 255 bytes: legal, but out.jsonl.partial is not
    partial = partial_path(out)
    assert len(os.fsencode(partial.name)) <= 255 and partial.parent == out.parent and partial != out
    monkeypatch.setattr(score_cli, "judge_from_args", lambda args: StopAfter(tiny_judge, calls=2))
    assert cli.main(["score", "-i", str(data), "-o", str(out), "--chunk-size", "2"]) == 130
    assert len(partial.read_text().splitlines()) == 2 and str(partial) in capsys.readouterr().err
    monkeypatch.setattr(score_cli, "judge_from_args", lambda args: tiny_judge)
    assert cli.main(["score", "-i", str(data), "-o", str(out), "--chunk-size", "2", "--resume"]) == 0
    assert _ids(out.read_text()) == list(range(6)) and not partial.exists()
    _refused(["score", "-i", str(data), "-o", str(tmp_path / ("o" * 256))], capsys, "longer than the file system allows")


# failed writes ---------------------------------------------------------------------------------------------
def test_disk_full_keeps_the_rows_written_and_resume_completes_the_run(tiny_judge, tmp_path, monkeypatch, capsys):
    rows = _rows(8)
    data = _jsonl(tmp_path / "in.jsonl", rows)
    out = tmp_path / "out.jsonl"
    out.write_text("the old output\n")
    monkeypatch.setattr(score_cli, "judge_from_args", lambda args: tiny_judge)
    calls = {"n": 0}
    real_fsync = os.fsync

    def full_on_the_third(fd):  # the disk fills up while the third chunk is saved
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", full_on_the_third)
    err = _refused(["score", "-i", str(data), "-o", str(out), "--chunk-size", "2", "--overwrite"], capsys,
                   "No space left on device", "free some space", "4 of 8 item(s)", str(partial_path(out)), "--resume")
    assert out.read_text() == "the old output\n"
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert cli.main(["score", "-i", str(data), "-o", str(out), "--chunk-size", "2", "--resume"]) == 0, err
    ids, scores = _clean(tiny_judge, rows)
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["id"] for r in lines] == ids and [r["logratio"] for r in lines] == pytest.approx(scores, abs=1e-5)


def test_a_write_cut_by_the_file_size_limit_is_a_message_and_resume_completes_it(tiny_judge, tmp_path, monkeypatch, capsys):
    """A real failed write (not a patched call): the file size limit (RLIMIT_FSIZE; Python ignores SIGXFSZ) stops
    the partial file in the middle of a chunk; the cut line is dropped and written again by --resume."""
    resource = pytest.importorskip("resource")
    rows = _rows(10)
    data = _jsonl(tmp_path / "in.jsonl", rows)
    out = tmp_path / "out.jsonl"
    monkeypatch.setattr(score_cli, "judge_from_args", lambda args: tiny_judge)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (700, hard))  # about 3 rows
    try:
        code = cli.main(["score", "-i", str(data), "-o", str(out), "--chunk-size", "2"])
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    err = capsys.readouterr().err
    assert code == 2 and "File too large" in err and "--resume" in err and "Traceback" not in err, err
    assert not out.exists() and partial_path(out).stat().st_size == 700
    assert cli.main(["score", "-i", str(data), "-o", str(out), "--chunk-size", "2", "--resume"]) == 0
    ids, scores = _clean(tiny_judge, rows)
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["id"] for r in lines] == ids and [r["logratio"] for r in lines] == pytest.approx(scores, abs=1e-5)


def test_what_a_command_left_buffered_is_flushed_by_main_and_a_full_output_is_a_message(tmp_path, monkeypatch, capsys):
    """A command's printed lines still buffered when it returns are flushed by main: a full device there is exit 2
    and one line (the null device then takes what is left)."""
    import io

    sink = os.open(tmp_path / "sink", os.O_WRONLY | os.O_CREAT)

    class FullAtFlush(io.StringIO):
        def flush(self):
            raise OSError(errno.ENOSPC, "No space left on device")

        def fileno(self):
            return sink

    rows = [{"s": x, "label": int(x > 0)} for x in (-3, -2, -1, -0.5, 0.2, 0.5, 1, 2, 3, -0.1, 0.3, 1.5)]
    data = _jsonl(tmp_path / "scores.jsonl", rows)
    monkeypatch.setattr(sys, "stdout", FullAtFlush())
    code = cli.main(["calibrate", "-i", str(data), "--score-column", "s", "-o", str(tmp_path / "cal.json")])
    os.close(sink)
    assert code == 2 and capsys.readouterr().err.splitlines()[-1] == \
        "pluie-reward calibrate: error: cannot write standard output (No space left on device)."


def test_score_writes_through_mains_one_standard_output(tiny_judge, monkeypatch, capsys):
    """main wraps standard output once (StandardOutput: a full device is an OutputError); score writes its records
    through that wrapper, not a second one around it."""
    from pluie_reward.tools.cli import score as score_cli
    from pluie_reward.tools.cli.output import StandardOutput

    made = []
    monkeypatch.setattr(StandardOutput, "__init__", lambda self, stream: (made.append(stream), setattr(self, "stream", stream))[-1])
    monkeypatch.setattr(score_cli, "judge_from_args", lambda args: tiny_judge)
    assert cli.main(["score", "The cat sleeps.", "A cat is asleep."]) == 0
    assert len(made) == 1 and not isinstance(made[0], StandardOutput)
    assert json.loads(capsys.readouterr().out)["logratio"] == pytest.approx(tiny_judge.score("para-fs", source="The cat sleeps.",
                                                                                             hypothesis="A cat is asleep.")[0], abs=1e-5)


def test_a_full_standard_output_is_a_message_not_a_traceback():
    """``pluie-reward score a b > /dev/full``: exit 2 with one line, nothing printed again at exit."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    with open("/dev/full", "w") as full:
        done = _run(["score", "The cat sleeps.", "A cat is asleep."], stdout=full, stderr=subprocess.PIPE, text=True)
    assert done.returncode == 2, done.stderr
    assert "cannot write standard output (No space left on device)" in done.stderr
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr


def test_a_print_to_a_full_standard_output_is_a_message_not_a_traceback():
    """``pluie-reward templates > /dev/full``: the listing outgrows the buffer, so a ``print`` inside the command fails
    (not the flush after it): exit 2 with the same one line."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    with open("/dev/full", "w") as full:
        done = _run(["templates"], stdout=full, stderr=subprocess.PIPE, text=True)
    assert done.returncode == 2, done.stderr
    assert done.stderr == "pluie-reward templates: error: cannot write standard output (No space left on device).\n", done.stderr


def test_the_progress_line_is_redrawn_on_a_terminal_and_ended_once_when_the_block_ends():
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    out = Terminal()
    with Progress(2, "scoring", stream=out) as bar:
        bar.update(1)
        bar.update(1)
    assert out.getvalue() == "\rscoring: 0/2 items (0%)\rscoring: 1/2 items (50%)\rscoring: 2/2 items (100%)\n"


def test_the_progress_line_is_ended_once_however_often_it_is_closed():
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    out, log = Terminal(), io.StringIO()
    for stream in (out, log):
        with Progress(1, "scoring", stream=stream) as bar:
            bar.update(1)
            bar.close()
    assert out.getvalue() == "\rscoring: 0/1 items (0%)\rscoring: 1/1 items (100%)\n"
    assert log.getvalue() == "scoring: 1/1 items (100%)\n"  # not a terminal: nothing to end
