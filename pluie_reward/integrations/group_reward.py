"""A group-relative TRL reward: the judge sees a GRPO group's G completions together and says which
is best (:func:`~pluie_reward.integrations.group.judge_groups`), instead of judging each alone.

GRPO already turns rewards into advantages within a group; a group judge compares the candidates
directly, in one prompt per order, and its ``p(best = i)`` sums to 1 over the group. Groups are the
runs of consecutive completions that share their prompt and field values (how TRL lays out
``num_generations`` completions per prompt), or blocks of ``group_size``.

Example:
    >>> from pluie_reward.testing import make_tiny_judge
    >>> reward = GroupPluieReward(make_tiny_judge(), "para-group", output="prob")
    >>> values = reward(prompts=["p", "p", "q", "q"], completions=["A cat naps.", "Dogs bark.", "Hi.", "Hello."],
    ...                 source=["The cat sleeps.", "The cat sleeps.", "Hello.", "Hello."])
    >>> round(values[0] + values[1], 6), round(values[2] + values[3], 6)
    (1.0, 1.0)
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

from ..core.judge import Judge
from .fields import map_fields, prompt_text
from .group import judge_groups, load_group_template
from .reward_base import Batch, Reward, Scores
from .rewards import JudgeHolder

OUTPUTS = ("prob", "logprob", "centered")


class GroupPluieReward(JudgeHolder, Reward):
    """p(best = completion) within its group, as a TRL reward.

    Args:
        judge: a :class:`Judge`, or a zero-argument factory returning one.
        template: a group template (``"para-group"``, ``"rev-group"``, ``"trans-group"``, a YAML path).
        fields: template field -> dataset column (unmapped fields read the column of the same name).
        output: ``"prob"`` (p(best), sums to 1 per group), ``"logprob"`` (log p(best)) or
            ``"centered"`` (log p(best) minus its group mean: 0 for a group the judge cannot separate).
        orders: cyclic orders per group (default all G: a per-slot position bias cancels exactly).
        group_size: fixed group size (default: runs of identical prompts and field values).
        name: the name TRL logs under.

    It logs ``<name>/max_prob`` (mean over groups of the largest p(best); 1/G: no separation) and
    ``<name>/groups``. Its ``template`` is a :class:`~pluie_reward.integrations.group.GroupTemplate`: guard it
    with a :class:`~pluie_reward.CompletionGuard` of a Yes/No template.
    """

    def __init__(self, judge: "Judge | Callable[[], Judge]", template: Any = "para-group", fields: Mapping[str, str] | None = None,
                 output: str = "prob", orders: int | None = None, group_size: int | None = None, name: str = "pluie_group") -> None:
        if output not in OUTPUTS:
            raise ValueError(f"{name}: unknown output {output!r}; use one of {list(OUTPUTS)}.")
        if group_size is not None and (isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 2):
            raise ValueError(f"{name}: group_size must be an integer >= 2 (or None for runs of equal prompts), got {group_size!r}.")
        self.template = load_group_template(template)
        if group_size is not None:
            self.template.for_size(group_size)
        self.field_map = map_fields(tuple(self.template.fields), fields, template=self.template.name, setting="fields",
                                    who=f"{name}: ")
        self.output, self.orders, self.group_size = output, orders, group_size
        self.__name__ = name
        self._hold(judge)

    def groups(self, prompts: Sequence[Any] | None, values: Mapping[str, list[Any]], n: int) -> list[range]:
        """The index ranges of the groups: blocks of ``group_size``, or runs of equal prompt and fields."""
        if self.group_size is not None:
            if n % self.group_size:
                raise ValueError(f"{self.__name__}: {n} completions are not groups of {self.group_size}.")
            return [range(i, i + self.group_size) for i in range(0, n, self.group_size)]
        keys = [(prompt_text(prompts[i], i) if prompts is not None else None, tuple(str(v[i]) for v in values.values())) for i in range(n)]
        runs, start = [], 0
        for i in range(1, n + 1):
            if i == n or keys[i] != keys[start]:
                runs.append(range(start, i))
                start = i
        single = [r.start for r in runs if len(r) < 2]
        if single:
            raise ValueError(f"{self.__name__}: completion {single[0]} has no other completion of the same prompt to be "
                             "compared with; group-relative judging needs GRPO groups (num_generations >= 2).")
        return runs

    def score_batch(self, batch: Batch) -> Scores:
        """One reward per completion (see the class docstring), and the ``max_prob`` and ``groups`` metrics."""
        texts = batch.texts
        n = len(texts)
        if not n:
            return Scores([])
        runs = self.groups(batch.prompts, batch.fields, n)
        fields = {name: [column[r.start] for r in runs] for name, column in batch.fields.items()}
        results = judge_groups(self.judge, self.template, [[texts[i] for i in r] for r in runs], orders=self.orders, **fields)
        rewards = [0.0] * n
        for run, result in zip(runs, results):
            logp = result["logp_best"]
            mean = sum(logp) / len(logp)
            for i, value in zip(run, logp):
                rewards[i] = math.exp(value) if self.output == "prob" else value - mean if self.output == "centered" else value
        return Scores(rewards, {f"{self.__name__}/max_prob": sum(max(r["p_best"]) for r in results) / len(results),
                                f"{self.__name__}/groups": float(len(results))})

    def __repr__(self) -> str:
        return (f"GroupPluieReward(name={self.__name__!r}, template={self.template.name!r}, output={self.output!r}, "
                f"orders={self.orders!r})")
