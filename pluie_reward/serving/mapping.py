"""OpenRLHF's remote reward-model request (query, prompts, labels) turned into template fields.

OpenRLHF (``--reward.remote_url http://host:port/get_reward --data.label_key <column>``) POSTs
``{"query": [prompt+response, ...], "prompts": [prompt, ...], "labels": [label, ...]}``, one sample per
request, and reads ``"rewards"``, ``"scores"`` and ``"extra_logs"`` from the JSON answer. The reward is
PLUIE, p_yes or the verdict, or a task's copy-proof reward (``--rm-reward paraphrase``). Without
``--data.label_key`` every label is ``""``. Which text fills which template field is fixed when the server
starts; the same mapping serves the in-process ``reward_func`` (:mod:`pluie_reward.serving.openrlhf`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

from ..core.template import Template
from ..integrations.fields import map_fields
from ..integrations.novelty import TASKS, check_blank_sources
from .protocol import OUTPUTS, RM_REWARD_KEY, choice

SOURCES = ("response", "query", "prompt", "label")
REWARDS = OUTPUTS + tuple(TASKS)
"""What ``rewards`` holds: a column of the judge's answer, or a task's copy-proof reward."""
DEFAULT_SOURCES = {"source": "label", "hypothesis": "response"}
LABEL_HELP = (
    "start OpenRLHF with --data.label_key <column> (OpenRLHF >= 0.10.2; --label_key up to 0.10.1), the dataset "
    "column holding the reference text, or map the field differently with --rm-field"
)
# end-of-turn / padding markers a decoded policy sequence may end with
DEFAULT_STRIP = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end|>", "</s>", "<eos>", "<pad>", "<end_of_turn>")


MIN_OVERLAP = 16  # characters of a left-truncated prompt's end that must match the query


def _longest_tail_in(prompt: str, query: str) -> int:
    """Length of the longest suffix of ``prompt`` occurring in ``query`` (if a suffix occurs, every
    shorter one does: binary search)."""
    low, high = 0, len(prompt)
    while low < high:
        middle = (low + high + 1) // 2
        if prompt[-middle:] in query:
            low = middle
        else:
            high = middle - 1
    return low


@dataclass(frozen=True)
class RewardMapping:
    """Where each template field comes from in an OpenRLHF request, and which score is the reward.

    Sources: ``response`` (the query with the prompt cut off and end-of-turn markers stripped),
    ``query``, ``prompt``, ``label``.

    Example:
        >>> from pluie_reward.core.template import load_template
        >>> m = RewardMapping.for_template(load_template("para-fs"))
        >>> m.fields
        {'source': 'label', 'hypothesis': 'response'}
        >>> m.columns(["<|im_start|>user\\nParaphrase: Hi<|im_end|>\\nHello!<|im_end|>"],
        ...           ["<|im_start|>user\\nParaphrase: Hi<|im_end|>\\n"], ["Hi"])
        {'source': ['Hi'], 'hypothesis': ['Hello!']}
    """

    fields: dict[str, str]
    reward: str = "logratio"
    strip: tuple[str, ...] = DEFAULT_STRIP

    @classmethod
    def for_template(cls, template: Template, overrides: Mapping[str, str] | None = None, reward: str = "logratio",
                     strip: Sequence[str] = DEFAULT_STRIP) -> "RewardMapping":
        """Default mapping (``hypothesis`` ← response, ``source`` ← label) updated by ``overrides``.

        Raises ``ValueError`` naming the fields left unmapped or the unknown names, or a task ``reward``
        the template cannot give (not Yes/No, or without the task's source field).
        """
        field_map = map_fields(
            template.fields, overrides, optional=template.optional_fields, defaults=DEFAULT_SOURCES,
            template=template.name, setting="--rm-field", what="source",
        )
        bad = {f: c for f, c in field_map.columns.items() if f in (overrides or {}) and c not in SOURCES}
        if bad:
            name, source = next(iter(bad.items()))
            raise ValueError(f"--rm-field {name}={source}: the source must be one of {list(SOURCES)}.")
        fields = field_map.select(SOURCES, where=f"OpenRLHF requests (template {template.name!r})", addable=False)
        reward = choice(reward, REWARDS, "reward (--rm-reward)")
        if reward in TASKS:
            TASKS[reward].check_template(template, who=f"--rm-reward {reward}: ")
        return cls(dict(fields), reward, tuple(s for s in strip if s))

    def with_reward(self, reward: str, template: Template) -> "RewardMapping":
        """This mapping with another reward: a request's ``rm_reward`` (:data:`~.protocol.RM_REWARD_KEY`), which
        OpenRLHF's in-process client sends from ``$PLUIE_REWARD_RM_REWARD``; checked as :meth:`for_template` checks it.

        Raises:
            ValueError: a name not in :data:`REWARDS` (case does not matter), or a task ``template`` cannot give.

        Example:
            >>> from pluie_reward.core.template import load_template
            >>> RewardMapping({"source": "label", "hypothesis": "response"}).with_reward("Paraphrase", load_template("para-fs")).reward
            'paraphrase'
        """
        reward = choice(reward, REWARDS, f"'{RM_REWARD_KEY}'")
        if reward in TASKS:
            TASKS[reward].check_template(template, who=f"'{RM_REWARD_KEY}': {reward}: ")
        return replace(self, reward=reward)

    def columns(
        self, queries: Sequence[str], prompts: Sequence[str] | None, labels: Sequence[Any] | None
    ) -> dict[str, list[str]]:
        """Template field columns for one request; ``ValueError`` (what is wrong, for which item) otherwise."""
        n = len(queries)
        for name, values in (("prompts", prompts), ("labels", labels)):
            if values is not None and len(values) != n:
                raise ValueError(f"'{name}' has {len(values)} entries but 'query' has {n}; send one per query.")
        needed = set(self.fields.values())
        if needed & {"prompt", "response"} and prompts is None:
            raise ValueError(
                "this server takes the response as the query minus its prompt, so requests need 'prompts' "
                "(OpenRLHF sends them); or start the server with --rm-field hypothesis=query."
            )
        if "label" in needed:
            if labels is None or any(label is None for label in labels):
                raise ValueError(
                    f"this server reads 'labels' (the reference text, e.g. the source sentence) but the request has none: {LABEL_HELP}."
                )
            bad = next((i for i, label in enumerate(labels) if not isinstance(label, str)), None)
            if bad is not None:
                raise ValueError(f"labels[{bad}] must be a string, got {type(labels[bad]).__name__}.")
            empty = next((i for i, label in enumerate(labels) if not label.strip()), None)
            if empty is not None:  # what OpenRLHF sends when no label key is set
                raise ValueError(f"labels[{empty}] is empty, so there is no reference text to judge against: {LABEL_HELP}.")
        texts = {"query": list(queries), "prompt": list(prompts or []), "label": list(labels or [])}
        if "response" in needed:
            texts["response"] = [self.response(i, q, p) for i, (q, p) in enumerate(zip(queries, prompts or []))]
        columns = {name: texts[source] for name, source in self.fields.items()}
        task = TASKS.get(self.reward)
        if task is not None:  # the copy-proof rewards' one rule (labels are checked above, for every reward)
            check_blank_sources(columns[task.source_field], f"--rm-reward {task.name}: ",
                                f"(field {task.source_field!r}, from the {self.fields[task.source_field]})")
        return columns

    def response(self, index: int, query: str, prompt: str) -> str:
        """The generated part of ``query``: what follows ``prompt``, without trailing end markers.

        OpenRLHF cuts an over-long prompt from the left before generating but sends the whole prompt:
        the query then starts with the prompt's tail, and the response follows the longest end of the prompt found in the query
        (at least ``MIN_OVERLAP`` characters).

        Example:
            >>> m = RewardMapping({"source": "label", "hypothesis": "response"})
            >>> m.response(0, "ng prompt text, please paraphrase it:\\nHello!<|im_end|>", "A long prompt text, please paraphrase it:\\n")
            'Hello!'
        """
        start = query.find(prompt)
        if start >= 0:
            start += len(prompt)
        else:
            overlap = _longest_tail_in(prompt, query)
            if overlap < min(MIN_OVERLAP, len(prompt)) or not prompt:
                raise ValueError(
                    f"item {index}: the prompt is not contained in the query, so the response cannot be cut out; "
                    "send query = prompt + response (as OpenRLHF does)."
                )
            start = query.find(prompt[-overlap:]) + overlap
        text = query[start:]
        changed = True
        while changed:
            changed = False
            text = text.strip()
            for marker in self.strip:
                if text.endswith(marker):
                    text, changed = text[: -len(marker)], True
        return text

    def request(self, columns: Mapping[str, Sequence[str]]) -> dict[str, Any]:
        """What to score for :meth:`columns`: the columns, and for a task's reward its ``task`` option, with which the
        batcher's judge reads each response's reading (:meth:`~pluie_reward.integrations.novelty.Task.judged`).

        Example:
            >>> RewardMapping({"source": "label", "hypothesis": "response"}, "paraphrase").request({"source": ["Hi."]})
            {'source': ['Hi.'], 'task': 'paraphrase'}
        """
        return {**columns, "task": self.reward} if self.reward in TASKS else dict(columns)

    def answer(self, results: Sequence[Mapping[str, Any]],
               columns: Mapping[str, Sequence[str]] | None = None, read: bool = True) -> dict[str, Any]:
        """OpenRLHF's reward answer for ``Judge.score(..., details=True)`` results: ``rewards`` (the
        configured score, the advantage's input), ``scores`` (p_yes in [0, 1], or a task's reward: OpenRLHF's
        dynamic filtering keeps a group when ``min < mean(scores) < max``) and ``extra_logs`` (logged per sample;
        a task adds ``pluie_novelty``).

        Args:
            results: one ``{"logratio", "p_yes", "verdict"}`` per item.
            columns: the items' template fields (:meth:`columns`), which a task's reward reads.
            read: the judge read each response's reading (:meth:`request`; its ``clean_text``).

        Example:
            >>> RewardMapping({"source": "label", "hypothesis": "response"}).answer([{"logratio": 1.0, "p_yes": 0.73, "verdict": True}])
            {'rewards': [1.0], 'scores': [0.73], 'extra_logs': {'pluie_logratio': [1.0], 'pluie_p_yes': [0.73], 'pluie_verdict': [1.0]}}
            >>> RewardMapping({"source": "label", "hypothesis": "response"}, "paraphrase").answer(
            ...     [{"logratio": 1.0, "p_yes": 0.73, "verdict": True}], {"source": ["Hi."], "hypothesis": ["HI!"]})["rewards"]
            [0.0]
        """
        p_yes = [float(r["p_yes"]) for r in results]
        extra_logs = {
            "pluie_logratio": [float(r["logratio"]) for r in results],
            "pluie_p_yes": p_yes,
            "pluie_verdict": [float(r["verdict"]) for r in results],
        }
        task = TASKS.get(self.reward)
        if task is None:
            rewards = [float(r[self.reward]) for r in results]
            return {"rewards": rewards, "scores": p_yes, "extra_logs": extra_logs}
        if columns is None:
            raise TypeError(f"the {task.name} reward reads the items' texts: pass columns=mapping.columns(...).")
        scores = task.answer_scores({"p_yes": p_yes, "verdict": extra_logs["pluie_verdict"]}, columns, read)
        extra_logs["pluie_novelty"] = scores.novelty
        return {"rewards": scores.rewards, "scores": scores.rewards, "extra_logs": extra_logs}
