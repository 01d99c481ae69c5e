"""The probe's report: a Markdown table and a PNG figure (matplotlib's Agg canvas, no display).

Example:
    >>> rows = [{"family": "copy", "kind": "copy", "n": 2, "mean": -1.5, "max": -1.0, "above_threshold": 0.0,
    ...          "above_honest": 0.5, "novelty": 0.0, "guarded": 0.0}]
    >>> print(markdown_report(rows))
    | family | kind | n | mean | max | > threshold | > honest | novelty | guarded |
    |---|---|---|---|---|---|---|---|---|
    | copy | copy | 2 | -1.50 | -1.00 | 0.0% | 50.0% | 0.00 | 0.0% |
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from ..report import markdown_table, number, percent

HEADERS = ("family", "kind", "n", "mean", "max", "> threshold", "> honest", "novelty", "guarded")
COPY_PROOF_HEADERS = ("copy-proof", "copy-proof ≥ honest")  # when the rows have a copy-proof reward
SEARCH_HEADERS = ("family", "kind", "n", "mean Δ", "worst Δ", "raised", "worst reward", "flagged", "worst example")


def markdown_report(rows: Sequence[Mapping[str, Any]]) -> str:
    """The rows of :func:`~pluie_reward.tools.probe.run_probe` as a Markdown table (``–`` where undefined)."""
    copy_proof = any(r.get("copy_proof") is not None for r in rows)
    return markdown_table(
        HEADERS + (COPY_PROOF_HEADERS if copy_proof else ()),
        [
            [r["family"], r["kind"], r["n"], number(r["mean"]), number(r["max"]), percent(r["above_threshold"]),
             percent(r["above_honest"]), number(r["novelty"]), percent(r["guarded"])]
            + ([number(r.get("copy_proof")), percent(r.get("copy_proof_above_honest"))] if copy_proof else [])
            for r in rows
        ],
    )


def search_report(rows: Sequence[Mapping[str, Any]], width: int = 60) -> str:
    """The rows of :func:`~pluie_reward.tools.probe.run.search_rows` as a Markdown table; the example's invisible
    characters and line breaks escaped, cut to ``width`` characters.

    Example:
        >>> print(search_report([{"family": "presentation_label", "kind": "presentation", "n": 2, "mean": 0.03, "worst": 0.06,
        ...                       "raised": 0.5, "worst_reward": 0.71, "flagged": True, "example": "Paraphrase:\\nIt\\u200brains."}]))
        | family | kind | n | mean Δ | worst Δ | raised | worst reward | flagged | worst example |
        |---|---|---|---|---|---|---|---|---|
        | presentation_label | presentation | 2 | +0.030 | +0.060 | 50.0% | 0.710 | **yes** | Paraphrase:\\nIt\\u200brains. |
    """
    shown = ["".join(c if c.isprintable() else ascii(c)[1:-1] for c in r["example"]) for r in rows]
    return markdown_table(SEARCH_HEADERS, [
        [r["family"], r["kind"], r["n"], f"{r['mean']:+.3f}", f"{r['worst']:+.3f}", percent(r["raised"]), number(r["worst_reward"], 3),
         "**yes**" if r["flagged"] else "no", text if len(text) <= width else text[: width - 1] + "…"] for r, text in zip(rows, shown)])


def plot_probe(rows: Sequence[Mapping[str, Any]], path: str | Path, *, threshold: float = 0.0,
               title: str | None = None) -> Path:
    """A PNG of two panels per family, its mean and max score and its shares above the threshold and the honest
    answer; returns its path.

    Example:
        >>> from pluie_reward.tools.probe import run_probe
        >>> rows = run_probe(judge, "para-fs", limit=2)
        >>> plot_probe(rows, "probe.png", title=f"{judge.name}, para-fs")
        PosixPath('probe.png')
    """
    from ..evaluation.plots import _figure  # lazy: CLI start-up (numpy and the evaluation modules)

    names = [r["family"] for r in rows]
    y = list(range(len(rows)))
    figure, (left, right) = _figure(10, 0.32 * len(rows) + 1.6, columns=2)
    colours = {"reference": "tab:green", "copy": "tab:blue", "attack": "tab:red", "presentation": "tab:olive"}
    left.barh(y, [r["mean"] for r in rows], color=[colours.get(r["kind"], "grey") for r in rows], alpha=0.8, label="mean")
    left.scatter([r["max"] for r in rows], y, color="black", s=12, zorder=3, label="max")
    honest = [r["mean"] for r in rows if r["kind"] == "reference"]
    if honest:
        left.axvline(honest[0], color="tab:green", linestyle="--", linewidth=1, label="honest mean")
    left.axvline(threshold, color="grey", linestyle=":", linewidth=1, label=f"threshold {threshold:g}")
    left.set_xlabel("PLUIE score (blue: copies, red: attacks, olive: presentation edits)")
    left.legend(fontsize=7, loc="upper right")
    height = 0.4
    right.barh([i - height / 2 for i in y], [r["above_threshold"] for r in rows], height, label="> threshold", color="tab:orange")
    right.barh([i + height / 2 for i in y], [r["above_honest"] or 0.0 for r in rows], height, label="> honest", color="tab:purple")
    right.set_xlim(0, 1)
    right.set_xlabel("share of the family's hypotheses")
    right.legend(fontsize=7, loc="upper right")
    left.set_yticks(y, names, fontsize=8)
    left.invert_yaxis()
    if title:
        figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out)
    return out
