"""The package's lines stay within the width pyproject.toml configures (``[tool.ruff] line-length``)."""

from __future__ import annotations

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
