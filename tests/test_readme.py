"""Every ```python block of README.md and of the documentation pages (docs/*.md) runs as written,
each in a fresh Python process (as a reader pasting it would), from an empty working folder. Test ids
name the file and the line of the block's opening fence (``docs/scoring.md:52-python``).

A block may be skipped only with an HTML comment on the line right before its fence, saying why:

    <!-- skip-test: needs a GPU -->

The list is kept short (at most MAX_SKIPPED blocks over all the files) and each entry must give a
reason. A block that needs an optional package says so the same way, and is skipped only where that
package is missing:

    <!-- needs: vllm -->

What a block prints is what the page shows: the ``# `` comment lines right below a ``print(...)``
(up to the first line that is not a comment) are its output, compared as doctest does, with ``...``
standing for any text (numbers that vary) and runs of whitespace equal (a long output may wrap over
several comment lines). Every ``print`` of a block shows its output; a comment meant as prose is
kept apart from it by a blank line::

    print(reward(completions=["A cat is asleep.", "Dogs bark."], source=["The cat sleeps."] * 2))
    # [1.0, -1.0]
"""

from __future__ import annotations

import ast
import doctest
import importlib.util
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import shared_path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]  # the files whose blocks run
SKIP = re.compile(r"^<!--\s*skip-test:\s*(.*?)\s*-->\s*$")
NEEDS = re.compile(r"^<!--\s*needs:\s*([A-Za-z_][\w.]*)\s*-->\s*$")
MAX_SKIPPED = 3
OUTPUT_FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
# Runs a block as `python block.py` would, recording what each of its own print calls writes to stdout
# (by line) apart from what the libraries it calls print: argv = [block.py, record.json]. The block's
# `print` is a global of its module (libraries that replace builtins.print, as Ray does, leave it be).
RUNNER = r"""
import io, json, runpy, sys
path, record = sys.argv[1], sys.argv[2]
printed, original = [], print
def recording_print(*args, **kwargs):
    if kwargs.get("file") in (None, sys.stdout):
        buffer = io.StringIO()
        original(*args, **{**kwargs, "file": buffer})
        printed.append((sys._getframe(1).f_lineno, buffer.getvalue()))
    original(*args, **kwargs)
sys.argv = [path]
try:
    runpy.run_path(path, {"print": recording_print}, run_name="__main__")
finally:
    with open(record, "w", encoding="utf-8") as file:
        json.dump(printed, file)
"""


@dataclass
class Block:
    line: int  # 1-based line of the opening fence
    section: str
    code: str
    skip: str | None
    needs: str | None = None  # an optional package the block imports (skipped where it is missing)
    file: str = ""  # the Markdown file, relative to the repository root

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


def python_blocks(text: str, file: str = "") -> list[Block]:
    """The ```python blocks of a Markdown text, with their section (the last heading outside code)
    and skip reason."""
    blocks, section, lines = [], "", text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        if re.match(r"^#{1,6} ", line):
            section = line.lstrip("#").strip()
        elif line.startswith("```"):
            start, body = i + 1, []
            i += 1
            while i < len(lines) and lines[i].strip() != "```":
                body.append(lines[i])
                i += 1
            if line == "```python":
                previous = lines[start - 2].strip() if start >= 2 else ""
                match, needs = SKIP.match(previous), NEEDS.match(previous)
                blocks.append(Block(start, section, "\n".join(body) + "\n", match.group(1) if match else None,
                                    needs.group(1) if needs else None, file))
        i += 1
    return blocks


@dataclass
class Shown:
    first: int  # the print call's lines in the block (1-based)
    last: int
    output: str | None  # what the page shows below it (None: nothing)


def shown_outputs(code: str) -> list[Shown]:
    """Each ``print(...)`` call of a block's code with the output shown below it: the ``# `` comment
    lines right after the call's last line, up to the first line that is not a comment."""
    lines, shown = code.splitlines(), []
    calls = [node for node in ast.walk(ast.parse(code))
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print"]
    for call in sorted(calls, key=lambda node: node.lineno):
        comments = []
        for line in lines[call.end_lineno:]:
            if not line.strip().startswith("#"):
                break
            comments.append(line.strip()[1:].removeprefix(" "))
        shown.append(Shown(call.lineno, call.end_lineno, "\n".join(comments) + "\n" if comments else None))
    return shown


def output_mismatches(shown: list[Shown], printed: list[tuple[int, str]], where: str = "") -> list[str]:
    """The prints whose output (the calls made from their lines, joined) is not what the page shows,
    compared as doctest does (``...`` any text, whitespace runs equal); one message each."""
    checker, wrong = doctest.OutputChecker(), []
    for item in shown:
        got = "".join(text for line, text in printed if item.first <= line <= item.last)
        if item.output is None or not checker.check_output(item.output, got, OUTPUT_FLAGS):
            wrong.append(f"{where} line {item.first} of the block prints:\n{got}the page shows:\n{item.output}")
    return wrong


BLOCKS = [block for page in PAGES
          for block in python_blocks(page.read_text(encoding="utf-8"), page.relative_to(ROOT).as_posix())]


def test_parser_and_skip_convention():
    sample = "# A\n```python\nx = 1\n```\n```bash\n# not a heading\n```\n<!-- skip-test: needs a GPU -->\n```python\ny = 2\n```\n"
    blocks = python_blocks(sample)
    assert [(b.line, b.section, b.code, b.skip) for b in blocks] == [(2, "A", "x = 1\n", None), (9, "A", "y = 2\n", "needs a GPU")]
    needing = python_blocks("<!-- needs: vllm -->\n```python\nimport vllm\n```\n")
    assert [(b.skip, b.needs) for b in needing] == [(None, "vllm")]


def test_shown_outputs_are_read_and_compared_as_doctest_does():
    code = ("x = [1.4536, -2.75]\nprint(x)  # PLUIE\n# [1.45..., -2.75]\n\n# prose\n"
            "for i in range(2):\n    print(\n        i)\n    # 0\n    # 1\nprint('no output shown')\n")
    shown = shown_outputs(code)
    assert [(s.first, s.last, s.output) for s in shown] == [(2, 2, "[1.45..., -2.75]\n"), (7, 8, "0\n1\n"), (11, 11, None)]
    printed = [(2, "[1.4536, -2.75]\n"), (7, "0\n"), (7, "1\n"), (11, "no output shown\n")]
    assert [m.split(" of")[0] for m in output_mismatches(shown, printed)] == [" line 11"]  # nothing shown
    assert output_mismatches(shown[:1], [(2, "[1.4636, -2.75]\n")])  # 1.46 is not 1.45...
    assert not output_mismatches(shown_outputs("print(1, 2)\n# 1\n# 2\n"), [(1, "1 2\n")])  # wrapped


def test_every_print_of_the_pages_shows_its_output():
    """A reader sees what each print gives without running it (and test_readme_python_block_runs checks it)."""
    missing = [f"{b.where} (line {s.first} of the block)" for b in BLOCKS for s in shown_outputs(b.code) if s.output is None]
    assert not missing, f"prints whose output the page does not show (a # comment line right below): {missing}"


def test_blocks_that_use_vllm_say_so():
    """A reader without the optional vLLM must see those blocks skipped, not failed (and the suite stays green)."""
    def code(block: Block) -> str:  # without comments
        return "\n".join(line.split("#")[0] for line in block.code.splitlines())

    using = [b.where for b in BLOCKS if any(k in code(b) for k in ('engine="vllm"', "import vllm", "from vllm"))]
    assert using, "the documentation shows the vLLM engine"
    assert [b.where for b in BLOCKS if b.needs == "vllm"] == using
    marked = [p.values[0].where for p in block_params(BLOCKS) if any(m.name == "vllm" for m in p.marks)]
    assert marked == using  # run where vLLM is (.ci/run, leg a)


def test_blocks_are_collected_from_the_readme_and_every_page():
    files = {b.file for b in BLOCKS}
    assert "README.md" in files and "docs/scoring.md" in files and "docs/rewards.md" in files
    assert len(BLOCKS) >= 18  # the 16 blocks the README held before the docs/ pages, and the README's own


def test_readme_skips_few_blocks_and_says_why():
    skipped = [b for b in BLOCKS if b.skip is not None]
    assert len(BLOCKS) >= 4
    assert len(skipped) <= MAX_SKIPPED, [f"{b.where}: {b.skip}" for b in skipped]
    assert all(len(b.skip) >= 10 for b in skipped)  # a reason, not just a marker


def block_params(blocks: list[Block]) -> list:
    """One pytest parameter per block, marked ``vllm`` when the block needs vLLM (CI runs those in the leg
    that has it; pyproject.toml's markers)."""
    return [pytest.param(b, marks=[pytest.mark.vllm] if b.needs == "vllm" else [],
                         id=f"{b.where}-{re.sub(r'[^a-z]+', '-', b.section.lower()).strip('-')}") for b in blocks]


@pytest.mark.slow
@pytest.mark.parametrize("block", block_params(BLOCKS))
def test_readme_python_block_runs(block: Block, tmp_path):
    if block.skip is not None:
        pytest.skip(f"{block.where}: {block.skip}")
    if block.needs is not None and importlib.util.find_spec(block.needs) is None:
        pytest.skip(f"{block.where}: needs {block.needs}, which is not installed")
    script = tmp_path / "block.py"
    script.write_text(block.code, encoding="utf-8")
    # the block runs in a scratch folder: the checkout and its scripts/ (which a block imports "from the root") on the path
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), str(ROOT / "scripts"), os.environ.get("PYTHONPATH")]))}
    env.setdefault("OMP_NUM_THREADS", "1")  # faster than oversubscribed threads on a shared CPU
    if "paraphrasus" in block.code:  # blocks reading the PARAPHRASUS data (the page says where it comes from)
        env["PARAPHRASUS_DIR"] = str(shared_path("data/paraphrasus"))
    record = tmp_path / "printed.json"
    done = subprocess.run([sys.executable, "-c", RUNNER, str(script), str(record)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, f"{block.where} ({block.section}) failed:\n{done.stderr[-4000:]}"
    printed = [tuple(call) for call in json.loads(record.read_text(encoding="utf-8"))]
    wrong = output_mismatches(shown_outputs(block.code), printed, block.where)
    assert not wrong, "\n".join(wrong)
