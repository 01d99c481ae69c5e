"""A group-relative TRL reward: the judge sees a GRPO group's G completions together and says which
is best (:func:`~pluie_reward.integrations.group.judge_groups`), instead of judging each alone.

GRPO already turns rewards into advantages within a group; a group judge compares the candidates
directly, in one prompt per order, and its ``p(best = i)`` sums to 1 over the group.

Which completions form a group: GRPO's group size G (TRL's ``num_generations``), never prompt equality
alone, since two neighbouring groups may share a prompt (a dataset with repeated rows, several epochs in
one batch) and would be judged as one group of 2G. G is, in this order: the ``group_size`` argument; the
trainer given to :meth:`GroupPluieReward.attach`; the trainer calling the reward (TRL's ``GRPOTrainer``
passes its own ``log_metric``, which names it): its ``num_generations`` in training and
``num_generations_eval`` in evaluation. The batch is then cut into consecutive blocks of G, and every
block must share its prompt and field values (else ``ValueError``: G does not match the batch). Called
with none of these (outside a trainer), each run of consecutive completions with the same prompt and
field values is one group: two groups of one prompt side by side are then one, so pass ``group_size``.

Example:
    >>> from pluie_reward.testing import make_tiny_judge
    >>> reward = GroupPluieReward(make_tiny_judge(), "para-group", output="prob")
    >>> values = reward(prompts=["p", "p", "q", "q"], completions=["A cat naps.", "Dogs bark.", "Hi.", "Hello."],
    ...                 source=["The cat sleeps.", "The cat sleeps.", "Hello.", "Hello."])
    >>> round(values[0] + values[1], 6), round(values[2] + values[3], 6)
    (1.0, 1.0)
    >>> twice = GroupPluieReward(make_tiny_judge(), "para-group", group_size=2)  # one prompt, two GRPO groups
    >>> values = twice(prompts=["p"] * 4, completions=["A cat naps.", "Dogs bark.", "A cat naps.", "Dogs bark."],
    ...                source=["The cat sleeps."] * 4)
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
        group_size: GRPO's group size (TRL's ``num_generations``); default: the trainer's (:meth:`attach`, or
            the ``GRPOTrainer`` calling it), else runs of identical prompts and field values (see the module's
            docstring).
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
        self.trainer: Any = None
        self.__name__ = name
        self._hold(judge)

    def attach(self, trainer: Any) -> Any:
        """Read the group size from ``trainer`` (TRL's ``GRPOTrainer``: ``num_generations``, or
        ``num_generations_eval`` while its model is in evaluation mode) at each call; ``group_size`` given to
        the constructor still wins.

        Returns:
            The trainer.

        Example:
            >>> from types import SimpleNamespace
            >>> from pluie_reward.testing import make_tiny_judge
            >>> trainer = SimpleNamespace(num_generations=4, num_generations_eval=2, model=SimpleNamespace(training=False))
            >>> reward = GroupPluieReward(make_tiny_judge())
            >>> reward.attach(trainer) is trainer, reward.size_for(None)
            (True, 2)
        """
        if trainer_group_size(trainer) is None:
            raise TypeError(f"{self.__name__}: {type(trainer).__name__} has no num_generations; attach a TRL GRPOTrainer "
                            "or pass group_size= to GroupPluieReward.")
        self.trainer = trainer
        return trainer

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state["trainer"] = None  # a copy in another process reads the size from TRL's call (or group_size)
        return state

    def size_for(self, log_metric: Any) -> int | None:
        """The group size of a call (None: not known, runs of equal prompts are the groups): ``group_size``, the
        attached trainer's, or that of the trainer whose ``log_metric`` the call received."""
        if self.group_size is not None:
            return self.group_size
        if self.trainer is not None:
            return trainer_group_size(self.trainer)
        return trainer_group_size(getattr(log_metric, "__self__", None))  # TRL passes its bound method

    def groups(self, prompts: Sequence[Any] | None, values: Mapping[str, list[Any]], n: int, size: int | None = None) -> list[range]:
        """The index ranges of the groups: blocks of ``size`` (each sharing its prompt and fields), or, without a
        size, runs of equal prompt and fields.

        Raises:
            ValueError: ``n`` is not a multiple of ``size``, a block mixes prompts or fields (``size`` does not
                match the batch), or a completion has no other one of its prompt (no size).
        """
        keys = [(prompt_text(prompts[i], i) if prompts is not None else None, tuple(str(v[i]) for v in values.values())) for i in range(n)]
        size = self.group_size if size is None else size
        if size is not None:
            if n % size:
                raise ValueError(f"{self.__name__}: {n} completions are not groups of {size} (GRPO's num_generations); "
                                 "each call must hold whole groups, in order.")
            blocks = [range(i, i + size) for i in range(0, n, size)]
            for block in blocks:
                other = next((i for i in block if keys[i] != keys[block.start]), None)
                if other is not None:
                    raise ValueError(f"{self.__name__}: completions {block.start} and {other} are in one group of {size} "
                                     "but have different prompts or field values: the group size does not match how the "
                                     "batch is laid out (GRPO's num_generations consecutive completions per prompt).")
            return blocks
        runs, start = [], 0
        for i in range(1, n + 1):
            if i == n or keys[i] != keys[start]:
                runs.append(range(start, i))
                start = i
        single = [r.start for r in runs if len(r) < 2]
        if single:
            raise ValueError(f"{self.__name__}: completion {single[0]} has no other completion of the same prompt to be "
                             "compared with; group-relative judging needs GRPO groups (num_generations >= 2).")
        longest = max(runs, key=len)
        if len(longest) > self.template.max_size:
            raise ValueError(f"{self.__name__}: completions {longest.start}-{longest.stop - 1} share a prompt, and without a "
                             f"group size they are one group of {len(longest)}, more than the template's "
                             f"{self.template.max_size}; pass group_size= (GRPO's num_generations) or attach the trainer.")
        return runs

    def score_batch(self, batch: Batch) -> Scores:
        """One reward per completion (see the class docstring), and the ``max_prob`` and ``groups`` metrics."""
        texts = batch.texts
        n = len(texts)
        if not n:
            return Scores([])
        runs = self.groups(batch.prompts, batch.fields, n, self.size_for(batch.log_metric))
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


def trainer_group_size(trainer: Any) -> int | None:
    """GRPO's group size on ``trainer`` (TRL's ``GRPOTrainer``): ``num_generations`` while its model trains,
    ``num_generations_eval`` (or ``num_generations``) while it evaluates; None for another object.

    Example:
        >>> from types import SimpleNamespace
        >>> trainer_group_size(SimpleNamespace(num_generations=8, num_generations_eval=None, model=SimpleNamespace(training=False)))
        8
        >>> trainer_group_size(print) is None
        True
    """
    train = getattr(trainer, "num_generations", None)
    if isinstance(train, bool) or not isinstance(train, int):
        return None
    if not getattr(getattr(trainer, "model", None), "training", True):
        evaluation = getattr(trainer, "num_generations_eval", None)
        return evaluation if isinstance(evaluation, int) and not isinstance(evaluation, bool) else train
    return train
