"""OpenRLHF's remote reward-model request (query, prompts, labels) turned into template fields.

OpenRLHF (``--remote_rm_url http://host:port/get_reward``) POSTs
``{"query": [prompt+response, ...], "prompts": [prompt, ...], "labels": [label, ...]}`` and reads
``"rewards"`` (and, in recent versions, ``"scores"`` and ``"extra_logs"``) from the JSON answer.
Which of these texts fills which template field is fixed when the server starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ...core.template import Template

SOURCES = ("response", "query", "prompt", "label")
REWARDS = ("logratio", "p_yes", "verdict")
# end-of-turn / padding markers a decoded policy sequence may end with
DEFAULT_STRIP = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end|>", "</s>", "<eos>", "<pad>", "<end_of_turn>")


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
    def for_template(
        cls,
        template: Template,
        overrides: Mapping[str, str] | None = None,
        reward: str = "logratio",
        strip: Sequence[str] = DEFAULT_STRIP,
    ) -> "RewardMapping":
        """Default mapping (``hypothesis`` ← response, ``source`` ← label) updated by ``overrides``.

        Raises ``ValueError`` naming the fields left unmapped or the unknown names.
        """
        fields = {f: s for f, s in (("source", "label"), ("hypothesis", "response")) if f in template.all_fields}
        for name, source in (overrides or {}).items():
            if name not in template.all_fields:
                raise ValueError(
                    f"--rm-field {name}=...: {name!r} is not a field of template {template.name!r} "
                    f"(fields: {list(template.all_fields)})."
                )
            if source not in SOURCES:
                raise ValueError(f"--rm-field {name}={source}: the source must be one of {list(SOURCES)}.")
            fields[name] = source
        missing = [f for f in template.fields if f not in fields]
        if missing:
            raise ValueError(
                f"template {template.name!r}: no source for field(s) {missing} of OpenRLHF requests; "
                f"map them with --rm-field FIELD=SOURCE (SOURCE in {list(SOURCES)})."
            )
        if reward not in REWARDS:
            raise ValueError(f"reward must be one of {list(REWARDS)}, got {reward!r}.")
        return cls(dict(fields), reward, tuple(s for s in strip if s))

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
                    "this server reads 'labels' (the reference text, e.g. the source sentence) but the request "
                    "has none; start OpenRLHF with --label_key <column>, or map the field differently."
                )
            bad = next((i for i, label in enumerate(labels) if not isinstance(label, str)), None)
            if bad is not None:
                raise ValueError(f"labels[{bad}] must be a string, got {type(labels[bad]).__name__}.")
        texts = {"query": list(queries), "prompt": list(prompts or []), "label": list(labels or [])}
        if "response" in needed:
            texts["response"] = [self.response(i, q, p) for i, (q, p) in enumerate(zip(queries, prompts or []))]
        return {name: texts[source] for name, source in self.fields.items()}

    def response(self, index: int, query: str, prompt: str) -> str:
        """The generated part of ``query``: what follows ``prompt``, without trailing end markers."""
        start = query.find(prompt)
        if start < 0:
            raise ValueError(
                f"item {index}: the prompt is not contained in the query, so the response cannot be cut out; "
                "send query = prompt + response (as OpenRLHF does)."
            )
        text = query[start + len(prompt) :]
        changed = True
        while changed:
            changed = False
            text = text.strip()
            for marker in self.strip:
                if text.endswith(marker):
                    text, changed = text[: -len(marker)], True
        return text

    def reward_values(self, results: Sequence[Mapping[str, Any]]) -> list[float]:
        """The configured score of each result as a float (verdict as 1.0 / 0.0)."""
        return [float(r[self.reward]) for r in results]
