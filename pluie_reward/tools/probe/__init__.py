"""An adversarial probe of a judge: how PLUIE scores copies, perturbed copies, empty and truncated
outputs, answer words, delimiter breaking, instructions to the judge, the master keys of "One Token to
Fool LLM-as-a-Judge" and the judge's own control tokens, next to honest answers; :func:`search`: what a copy-proof
reward pays. ``pluie-reward probe`` is its command line; families and built-in sources are data files in ``data/``.

Example:
    >>> from pluie_reward.tools.probe import family_names
    >>> family_names()[:4]
    ['honest', 'unrelated', 'copy', 'copy_case']
    >>> rows = run_probe(judge, "para-fs", limit=2)  # e.g. judge = Judge.load()
    >>> print(markdown_report(rows))
    | family | kind | n | mean | max | > threshold | > honest | novelty | guarded | copy-proof | copy-proof ≥ honest |
    |---|---|---|---|---|---|---|---|---|---|---|
    | honest | reference | 2 | ...
"""

from .families import ProbeContext, SourceItem, builtin_sample, family_kind, family_names, generate
from .report import markdown_report, plot_probe
from .run import failing_families, prepare_sources, probe_items, run_probe, search, search_rows, summarize

__all__ = [
    "ProbeContext",
    "SourceItem",
    "builtin_sample",
    "failing_families",
    "family_kind",
    "family_names",
    "generate",
    "markdown_report",
    "plot_probe",
    "prepare_sources",
    "probe_items",
    "run_probe",
    "search",
    "search_rows",
    "summarize",
]
