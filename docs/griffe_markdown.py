"""A Griffe extension for the API reference (mkdocs.yml): the package's docstrings are written for
Sphinx-style readers and doctest; two habits of theirs are translated for the Markdown renderer.

* Doctests are headed ``Example:``, which the Google-style parser reads as an admonition of Markdown
  text (the ``>>>`` lines would render as quotes); renamed ``Examples:``, they render as code.
* Cross-references are Sphinx roles (``:class:`~pluie_reward.Judge```, ``:meth:`score```); they
  become inline code (``Judge``, ``score``), as Sphinx shows them.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_EXAMPLE = re.compile(r"^(\s*)Example:\s*$", re.MULTILINE)
_ROLE = re.compile(r":(?:class|meth|func|attr|mod|data|exc|obj|const):`(~?)([^`]+)`")


def _role(match: re.Match) -> str:
    short, target = match.groups()
    return f"`{target.rsplit('.', 1)[-1] if short else target}`"


class DocstringMarkdown(griffe.Extension):
    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _ROLE.sub(_role, _EXAMPLE.sub(r"\1Examples:", obj.docstring.value))
