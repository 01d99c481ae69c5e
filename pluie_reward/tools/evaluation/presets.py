"""The *-PLUIE paper's evaluations as one-command presets (``data/presets.json``): which columns of the published
data feed which template fields, how labels read, and the paper's rows to print beside yours
(``data/star_pluie_2026.json``, from the paper's Tables 1 and 2).

- ``parareval``: ParaReval (Jourdan et al., 2025), human A/B preferences between two revisions of a
  scientific paragraph; Table 2 (text revision): Rev-PLUIE without and with the gold revision
  ("w.g.") and Para-PLUIE (original vs revision).
- ``net``: the NEAT human evaluation of Nile -> English translations (Munson et al., 2025); Table 1
  (Nile translation): Net-PLUIE and Para-PLUIE, MUSHRA ratings "Good"/"Excellent" (>= 60) positive.
- ``fr-paraphrase``: the French paronym/synonym sentences of Tytgat et al. (2024) expanded into the
  paper's 6 pairs per sentence (appendix B); Table 1 (paraphrase): Fr-PLUIE and Para-PLUIE.

Column names default to the published shapes; ``--column ROLE=COLUMN`` renames any of them.

Example:
    >>> PRESETS["parareval"].roles["human"]
    'eval_annotation.preference'
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Callable, Mapping

PAPER_FILE = "star_pluie_2026.json"
PRESETS_FILE = "presets.json"  # the presets as data: roles, conditions, the paper rows they match
PAPER_JUDGES = ("Phi-4 14B", "Llama 3 70B")
# MUSHRA's scale: Bad 0-20, Poor 20-40, Fair 40-60, Good 60-80, Excellent 80-100
MUSHRA_WORDS = {"excellent": True, "good": True, "fair": False, "poor": False, "bad": False}
MUSHRA_CUTOFF = 60.0


@dataclass(frozen=True)
class PresetCondition:
    """One row of a preset: a template and which roles (data columns) fill its fields."""

    name: str
    template: str
    fields: Mapping[str, str]  # template field -> role
    row: str = ""
    variant: str = ""


@dataclass(frozen=True)
class Preset:
    """A published evaluation: its data shape (roles -> default columns) and its conditions."""

    name: str
    task: str  # "preference" or "classification"
    description: str
    roles: Mapping[str, str]  # role -> default column (dotted for nested)
    conditions: tuple[PresetCondition, ...]
    reference_role: str  # what the baselines compare the candidate/hypothesis with
    paper_table: str
    paper_metrics: tuple[str, ...]  # the paper's rows shown beside (with the baselines run)
    role_help: Mapping[str, str] = field(default_factory=dict)
    label: Callable[[Any], bool] | None = None  # classification: raw label -> bool
    label_rule: str = ""


def mushra_label(value: Any) -> bool:
    """NEAT's binarisation: a MUSHRA rating "Good"/"Excellent" (or a score >= 60 on 0-100) is positive.

    Example:
        >>> mushra_label("Good"), mushra_label(59.5), mushra_label("80")
        (True, False, True)
    """
    not_rating = ValueError(f"{value!r} is not a MUSHRA rating; use Bad/Poor/Fair/Good/Excellent or a score from 0 to 100")
    if isinstance(value, bool) or value is None:
        raise not_rating
    if isinstance(value, str):
        key = value.strip().lower()
        if key in MUSHRA_WORDS:
            return MUSHRA_WORDS[key]
        try:
            value = float(key)
        except ValueError:
            raise not_rating from None
    if not 0 <= float(value) <= 100:
        raise ValueError(f"{value!r} is not a MUSHRA score (0 to 100)")
    return float(value) >= MUSHRA_CUTOFF


def _data(file: str) -> Any:
    """One JSON file of the package's ``evaluation/data`` folder."""
    return json.loads((resources.files("pluie_reward.tools.evaluation") / "data" / file).read_text(encoding="utf-8"))


def load_presets(file: str = PRESETS_FILE) -> dict[str, Preset]:
    """The presets of ``data/<file>`` by name, in the file's order (``conditions`` as :class:`PresetCondition`
    fields; ``label`` names a rule of :data:`LABEL_RULES`).

    Example:
        >>> load_presets()["net"].label is mushra_label
        True
    """
    presets = {}
    for name, spec in _data(file).items():
        spec = dict(spec, conditions=tuple(PresetCondition(**c) for c in spec["conditions"]),
                    paper_metrics=tuple(spec["paper_metrics"]))
        if "label" in spec:
            spec["label"] = LABEL_RULES[spec["label"]]
        presets[name] = Preset(name=name, **spec)
    return presets


LABEL_RULES: dict[str, Callable[[Any], bool]] = {"mushra": mushra_label}
"""The label rules a preset's ``"label"`` may name (raw label -> bool)."""
PRESETS: dict[str, Preset] = load_presets()

# The 6 pairs of appendix B: (sentence 1 role, sentence 2 role, paraphrase?). The seed's text lists
# all six as "paraphrase" (a transcription slip): a paronym changes the meaning, so only the two
# synonym pairs are paraphrases, which gives the paper's 1/3 positives (33.6% over 1914 pairs).
FRENCH_PAIRS = (
    ("original", "synonym", True),
    ("paronym", "synonym_of_paronym", True),
    ("original", "paronym", False),
    ("original", "synonym_of_paronym", False),
    ("paronym", "synonym", False),
    ("synonym", "synonym_of_paronym", False),
)


def paper_table(key: str, metrics: tuple[str, ...] | None = None, baselines: tuple[str, ...] = ()) -> dict[str, Any]:
    """The paper's published rows of ``key`` ("table1/net", "table2/parareval"...): those of
    ``metrics`` for the two judges of the paper, plus the rows of ``baselines`` (paper names).

    Example:
        >>> rows = paper_table("table2/parareval", ("Rev-PLUIE",))["rows"]
        >>> [(r["judge"], r["pairwise_accuracy"], r["with_gold"]["pairwise_accuracy"]) for r in rows]
        [('Phi-4 14B', 0.61, 0.61), ('Llama 3 70B', 0.61, 0.62)]
    """
    data = _data(PAPER_FILE)
    table = data["tables"][key]
    rows = [r for r in table["rows"]
            if metrics is None or (r["metric"] in metrics and r["judge"] in PAPER_JUDGES) or r["metric"] in baselines]
    return {"reference": data["reference"], "caption": table["caption"], "rows": rows}
