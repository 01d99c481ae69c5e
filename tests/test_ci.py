"""The CI runs what the README tells a new user to run, and the pins bound what can break a fresh install."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def readme_commands() -> list[str]:
    """The commands of the README's first bash block (comments dropped)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```bash\n(.*?)```", text, re.S).group(1)
    return [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def ci_legs() -> dict[str, list[str]]:
    """The command lines of each ``leg NAME`` section of .ci/run."""
    legs: dict[str, list[str]] = {}
    current = None
    for line in (ROOT / ".ci" / "run").read_text().splitlines():
        if re.match(r"^leg \w+$", line):
            current = line.split()[1]
            legs[current] = []
        elif current and line and not line.startswith(("#", "versions", "deactivate", "echo")):
            legs[current].append(line)
    return legs


def test_ci_leg_a_runs_the_readme_commands_verbatim():
    assert readme_commands() == ci_legs()["a"]
    assert len(readme_commands()) == 2 and readme_commands()[1] == "python -m pytest -q"


def test_ci_leg_b_takes_the_newest_allowed_releases_without_vllm():
    b = ci_legs()["b"]
    assert b[-1] == "python -m pytest -q"
    assert "vllm" not in " ".join(b) and 'pip install -e ".[test]"' in b[0]
    assert not any("==" in part for part in b[0].split() if "torch" not in part)  # nothing else held back


def test_every_requirement_has_an_upper_bound():
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = list(project["dependencies"]) + [r for extra in project["optional-dependencies"].values() for r in extra]
    unbounded = [r for r in requirements if "<" not in r and "==" not in r]
    assert not unbounded, f"requirements without an upper bound: {unbounded}"
    pins = dict(re.match(r"([\w-]+)(.*)", r.replace(" ", "")).groups() for r in requirements)
    assert pins["pytest"].endswith("<10") and "<6" in pins["transformers"]
