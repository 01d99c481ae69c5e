"""The package's lines stay within the width pyproject.toml configures (``[tool.ruff] line-length``), and it
imports nothing it does not use."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def line_length() -> int:
    """``[tool.ruff] line-length`` of pyproject.toml (read with a regex: tomllib is Python >= 3.11)."""
    section = (ROOT / "pyproject.toml").read_text(encoding="utf-8").split("[tool.ruff]", 1)[1].split("\n[", 1)[0]
    return int(re.search(r"^line-length\s*=\s*(\d+)", section, re.MULTILINE).group(1))


def test_no_line_of_the_package_is_wider_than_the_configured_width():
    width = line_length()
    wide = [f"{path.relative_to(ROOT)}:{number}: {len(line)} characters"
            for path in sorted((ROOT / "pluie_reward").rglob("*.py"))
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if len(line) > width]
    assert not wide, f"wrap these lines to {width} characters:\n" + "\n".join(wide)


def test_the_package_imports_nothing_it_does_not_use():
    """Every name a module imports appears in it again (code, a string annotation, ``__all__``); an import kept for its
    side effect says so (``# noqa: F401``). ruff's F401 in spirit, without ruff (not a dependency of the tests)."""
    unused = []
    for path in sorted((ROOT / "pluie_reward").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, (ast.Import, ast.ImportFrom)) or getattr(node, "module", "") == "__future__":
                continue
            if "noqa: F401" in " ".join(lines[node.lineno - 1 : node.end_lineno]):
                continue
            rest = "\n".join(lines[: node.lineno - 1] + lines[node.end_lineno :])
            for alias in node.names:
                name = (alias.asname or alias.name).split(".")[0]
                if not re.search(rf"\b{re.escape(name)}\b", rest):
                    unused.append(f"{path.relative_to(ROOT)}:{node.lineno}: {name}")
    assert not unused, "imported and never used (drop the import):\n" + "\n".join(unused)
