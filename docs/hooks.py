"""MkDocs hooks: README.md (the home page) and BENCHMARKS.md stay at the repository root, where GitHub
and PyPI show them, and are pages of the site too.

The Markdown files link to each other as files in the repository (``docs/cli.md`` from the README,
``../BENCHMARKS.md`` from a page), so the links work on GitHub; on the site these pages sit beside
the others, and the links are rewritten to match before MkDocs checks them.
"""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[1]
ROOT_PAGES = {"index.md": "README.md", "BENCHMARKS.md": "BENCHMARKS.md"}  # site path: file at the root


def on_files(files, config):
    for uri, name in ROOT_PAGES.items():
        files.append(File.generated(config, uri, abs_src_path=str(ROOT / name)))
    return files


def on_page_markdown(markdown, page, config, files):
    if page.file.src_uri in ROOT_PAGES:  # a root file: docs/x.md is x.md on the site
        return re.sub(r"\]\(docs/", "](", markdown)
    # a page of docs/: ../README.md is the home page, ../BENCHMARKS.md a page beside it
    markdown = re.sub(r"\]\(\.\./README\.md", "](index.md", markdown)
    return re.sub(r"\]\(\.\./BENCHMARKS\.md", "](BENCHMARKS.md", markdown)
