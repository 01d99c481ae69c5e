"""The README is a landing page and the documentation site builds: every page in the nav, every link
and anchor between the pages (README.md and BENCHMARKS.md included) resolved, the API reference
generated from the docstrings, no warning. The pages' ```python blocks run in tests/test_readme.py."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_README_LINES = 300


def test_readme_is_a_landing_page():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines: move sections to docs/"


def test_readme_links_every_page():
    links = set(re.findall(r"\]\((docs/[\w-]+\.md)", (ROOT / "README.md").read_text(encoding="utf-8")))
    pages = {p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md")}
    assert pages <= links, f"pages the README does not link: {sorted(pages - links)}"
    assert links <= pages, f"README links to missing pages: {sorted(links - pages)}"


def test_docs_site_builds_without_warnings(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings_handlers.python")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
                           "-d", str(tmp_path / "site")], cwd=ROOT, capture_output=True, text=True, timeout=600)
    output = done.stdout + done.stderr
    assert done.returncode == 0 and "WARNING" not in output, output[-4000:]
    for page in ("index.html", "api/index.html", "BENCHMARKS/index.html", "default-judge/index.html"):
        assert (tmp_path / "site" / page).is_file(), page
    assert "pluie_reward.core.judge.Judge" in (tmp_path / "site" / "api" / "index.html").read_text(encoding="utf-8")


def test_pages_reading_the_paraphrasus_data_say_where_it_comes_from():
    """The PARAPHRASUS files are not shipped: a page whose commands or code read them links to the
    section that says where they come from and how to point the commands at them (a reader's clone has
    no ../shared/data/paraphrasus)."""
    section = (ROOT / "docs" / "evaluation.md").read_text(encoding="utf-8").split("## The PARAPHRASUS data")[-1]
    assert all(s in section for s in ("github.com/impresso/paraphrasus", "--data-dir", "PARAPHRASUS_DIR", "data_dir="))
    reading = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = page.read_text(encoding="utf-8")
        code = "\n".join(re.findall(r"^```\w*\n(.*?)^```", text, flags=re.S | re.M))
        if "paraphrasus" in code.lower():
            reading.append(page.name)
            assert page.name == "evaluation.md" or "evaluation.md#the-paraphrasus-data" in text, page.name
    assert {"evaluation.md", "default-judge.md", "benchmark.md"} <= set(reading)
