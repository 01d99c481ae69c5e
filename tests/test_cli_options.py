"""Every numeric option of every ``pluie-reward`` command is checked before anything loads or binds:
``nan`` and ``inf`` are refused everywhere, ``-1`` and ``0`` wherever they mean nothing, with exit
code 2 and a message naming the option, and no traceback.

The options are found by walking the parser (sub-commands and their sub-commands), so an option
added later is covered without editing this file: it must refuse ``0`` and ``-1`` unless it is
listed below with the reason those values make sense.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from pluie_reward import Judge
from pluie_reward.tools import cli
from pluie_reward.tools.cli.main import COMMAND_MODULES, build_parser
from pluie_reward.tools.cli.registry import COMMANDS

# options where 0 is a meaningful value (why), by option string; the others must refuse it
ZERO_MEANS_SOMETHING = {
    "--threshold": "a threshold on a log-ratio may be any finite number",
    "--seed": "seed 0 is a seed",
    "--epsilon": "a tie margin of 0: only equal scores tie",
    "--heldout": "no held-out part",
    "--l2": "plain maximum likelihood",
    "--fail-above": "fail on any share above 0",
    "--label-weight": "teacher only",
    "--lora-dropout": "no dropout",
    "--weight-decay": "no weight decay",
    "--warmup-ratio": "no warm-up",
    # serve
    "--max-wait-ms": "no waiting for other requests to batch with",
    "--graceful-timeout": "stop without waiting",
}
# options where -1 is a meaningful value
MINUS_ONE_MEANS_SOMETHING = {
    "--threshold": "a threshold on a log-ratio may be any finite number",
    "--max-steps": "-1: the epochs decide",
}
VALUES = ("nan", "inf", "-1", "0")


def _parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(command path, parser) of every command and sub-command under ``parser``."""
    for action in parser._actions:  # argparse has no public listing of a parser's arguments
        if isinstance(action.choices, dict) and all(isinstance(p, argparse.ArgumentParser) for p in action.choices.values()):
            for name, sub in action.choices.items():
                yield from _parsers(sub, (*path, name))
    if path:
        yield path, parser


def _is_numeric(action: argparse.Action) -> bool:
    if not action.option_strings or not callable(action.type):
        return False
    try:
        value = action.type("1")
    except Exception:  # noqa: BLE001  (a type that refuses "1" is not a number's)
        return False
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _required(parser: argparse.ArgumentParser) -> list[str]:
    """Placeholder values of the parser's required arguments, so that parsing gets to the option tested."""
    argv = []
    for action in parser._actions:
        if not action.required or (isinstance(action.choices, dict)):
            continue
        value = str(next(iter(action.choices))) if action.choices else "x"
        argv += [action.option_strings[0], value] if action.option_strings else [value]
    return argv


PARSER = build_parser()
CASES = [
    pytest.param(path, action, value, id=f"{' '.join(path)} {action.option_strings[-1]} {value}")
    for path, parser in _parsers(PARSER)
    for action in parser._actions
    if _is_numeric(action)
    for value in VALUES
]


def test_the_walk_finds_the_options_of_every_command():
    commands = {path[0] for path, _, _ in (c.values for c in CASES)}
    assert {"score", "eval", "calibrate", "bench", "probe", "plot-run", "tune", "serve"} <= commands
    options = {(" ".join(path), action.option_strings[0]) for path, action, _ in (c.values for c in CASES)}
    assert ("eval paraphrasus", "--seed") in options and ("score", "--threshold") in options and ("tune", "--epochs") in options


def _should_accept(option_strings: list[str], value: str) -> bool:
    if value in ("nan", "inf"):
        return False
    allowed = ZERO_MEANS_SOMETHING if value == "0" else MINUS_ONE_MEANS_SOMETHING
    return any(o in allowed for o in option_strings)


@pytest.fixture()
def nothing_loads(monkeypatch):
    """Every way a command loads a judge or binds raises: a refusal must come before."""
    import importlib

    def forbidden(*args, **kwargs):
        raise AssertionError("a judge was loaded (or a server started) before the option was checked")

    for name in COMMAND_MODULES:
        module = importlib.import_module(name)
        if hasattr(module, "judge_from_args"):
            monkeypatch.setattr(module, "judge_from_args", forbidden)
    monkeypatch.setattr(importlib.import_module("pluie_reward.tools.server.cli"), "run", forbidden)
    monkeypatch.setattr(Judge, "load", classmethod(forbidden))
    monkeypatch.setattr(Judge, "connect", classmethod(forbidden))


@pytest.mark.parametrize("path, action, value", CASES)
def test_numeric_option_refuses_what_means_nothing(path, action, value, nothing_loads, capsys):
    parser = dict(_parsers(PARSER))[path]
    argv = [*path, *_required(parser), action.option_strings[0], value]
    try:
        PARSER.parse_args(argv)
        parsed = True
    except SystemExit as done:
        assert done.code == 2
        parsed = False
    err = capsys.readouterr().err
    if _should_accept(action.option_strings, value):
        assert parsed, f"{' '.join(argv)} was refused: {err}"
        return
    if parsed:  # not refused by the parser: the command must refuse it before anything loads
        assert cli.main(argv) == 2, f"{' '.join(argv)} was accepted"
        err = capsys.readouterr().err
    assert "Traceback" not in err
    assert any(o in err for o in action.option_strings), f"{' '.join(argv)}: the message does not name the option: {err}"


def test_serve_options_that_cannot_work_are_refused_before_loading(nothing_loads, capsys):
    for argv, needles in [
        (["--max-body-mb", "1e308"], ["--max-body-mb", "1e+308"]),  # was an OverflowError traceback
        (["--max-body-mb", "1e-9"], ["--max-body-mb", "1e-09", "1 byte"]),  # was refused by create_app, after loading
        (["--host", "not a host"], ["--host 'not a host'"]),  # was refused by uvicorn, after loading
    ]:
        assert cli.main(["serve", *argv]) == 2, argv
        err = capsys.readouterr().err
        assert all(needle in err for needle in needles) and "Traceback" not in err, err


def test_an_output_folder_that_cannot_be_created_is_refused_before_loading(nothing_loads, tmp_path, capsys):
    if not Path("/proc/self").is_dir():
        pytest.skip("needs Linux /proc: a folder even root cannot create anything in")
    data = tmp_path / "in.jsonl"
    data.write_text('{"source": "a", "hypothesis": "b", "label": 1}\n')
    for argv in (["score", "-i", str(data), "-o", "/proc/missing/dir/x.jsonl"],
                 ["eval", "classification", "-i", str(data), "-o", "/proc/missing/dir"],
                 ["tune", "-i", str(data), "--label-column", "label", "-o", "/proc/missing/dir"]):
        assert cli.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert "/proc" in err and "Traceback" not in err, err


@pytest.fixture()
def no_load(monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("the judge was loaded although an option would do nothing")

    monkeypatch.setattr(Judge, "load", classmethod(forbidden))


def _refused(cases, capsys):
    for argv, needles in cases:
        assert cli.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert all(needle in err for needle in needles) and "Traceback" not in err, err


def test_column_and_split_with_positional_values_are_refused(no_load, capsys):
    _refused([(["score", "The cat sleeps.", "A cat.", "--column", "source=text"], ["--column", "--input"]),
              (["score", "The cat sleeps.", "A cat.", "--split", "test"], ["--split", "--input"])], capsys)


def test_vllm_options_with_another_engine_are_refused(no_load, tmp_path, capsys):
    data = tmp_path / "in.jsonl"
    data.write_text('{"source": "a", "hypothesis": "b"}\n')
    _refused([(["score", "-i", str(data), "--tensor-parallel-size", "1"], ["--tensor-parallel-size", "--engine vllm"]),
              (["score", "-i", str(data), "--gpu-memory-utilization", "0.5"], ["--gpu-memory-utilization", "--engine vllm"]),
              (["serve", "--gpu-memory-utilization", "0.5"], ["--gpu-memory-utilization", "--engine vllm"])], capsys)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_help_ends_with_an_example_that_parses(name, capsys):
    """Each command's --help ends with an example naming the command, and the example is a valid command line."""
    import shlex

    assert cli.main([name, "--help"]) == 0
    last = capsys.readouterr().out.rstrip().splitlines()[-1]
    assert last.startswith(f"Example: pluie-reward {name} "), last
    argv = shlex.split(last.removeprefix("Example: pluie-reward "))
    assert build_parser().parse_args(argv).command == name
