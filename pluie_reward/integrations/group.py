"""Group-relative judging: which of the G candidates of one group is best, read in one pass per order.

A group template (YAML in ``pluie_reward/templates/group/``) shows the task's fields and the G
candidates with one-token labels (``A``, ``B``, ...), and asks which candidate is best. The judge's
distribution over the G label tokens at the answer position is ``p(best = slot)``. For G candidates the
group template becomes an ordinary choice :class:`~pluie_reward.core.template.Template` with fields
``candidate_1`` ... ``candidate_G``, scored by :meth:`Judge.score` like any other template.

Position bias: a judge prefers some slots whatever they hold. Order ``k`` of a group puts candidate
``i`` in slot ``(i + s_k) mod G`` (a cyclic shift ``s_k``). If the bias is an additive logit per slot,
averaging each candidate's log-probability over all G shifts gives every candidate every slot once,
and the bias cancels exactly; ``K < G`` evenly spaced shifts average the bias over K slots only
(:func:`residual_bias` measures what is left). The averaged log-probabilities are renormalised:

    log p(best = i) = log_softmax_i( (1/K) Σ_k log p_k(label of slot (i + s_k) mod G) )

Example:
    >>> group = load_group_template("para-group")
    >>> t = group.for_size(3)
    >>> t.fields, t.answers
    (('source', 'candidate_1', 'candidate_2', 'candidate_3'), ('A', 'B', 'C'))
    >>> shifts(4, 2), shifts(4, None)
    ([0, 2], [0, 1, 2, 3])
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from ..core.template import Template


@dataclass(frozen=True)
class GroupTemplate:
    """A question about a group of candidates, answered with one candidate's label.

    Attributes:
        name: the template's name.
        fields: the task's fields (e.g. ``source``), shared by the group.
        labels: one-token labels, one per slot (the group size is at most ``len(labels)``).
        item: how one candidate is shown (``{label}`` and ``{candidate}``).
        separator: text between the shown candidates.
        messages: chat turns as in a :class:`~pluie_reward.core.template.Template`; ``{candidates}``, ``{n}``,
            ``{first}``, ``{last}`` are filled per group size, other ``{field}`` placeholders per item.
    """

    name: str
    fields: Mapping[str, str]
    labels: tuple[str, ...]
    messages: tuple[Mapping[str, Any], ...]
    item: str = '{label}: "{candidate}"'
    separator: str = "\n"
    description: str = ""
    reference: str = ""
    language: str = "en"
    system: str | None = None
    _sizes: dict = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if len(self.labels) < 2 or len(set(self.labels)) != len(self.labels):
            raise ValueError(f"group template {self.name!r}: labels must be at least two distinct words.")
        if "{candidate}" not in self.item or "{label}" not in self.item:
            raise ValueError(f"group template {self.name!r}: item must show {{label}} and {{candidate}}.")
        if not any("{candidates}" in str(m.get("content", "")) for m in self.messages):
            raise ValueError(f"group template {self.name!r}: a message must show the {{candidates}}.")
        clash = [f for f in self.fields if f.startswith("candidate_")]
        if clash:
            raise ValueError(f"group template {self.name!r}: field names candidate_* are the slots' ({clash}).")

    @property
    def max_size(self) -> int:
        """The largest group this template can show (one label per slot)."""
        return len(self.labels)

    def for_size(self, size: int) -> Template:
        """The choice :class:`~pluie_reward.core.template.Template` for groups of ``size`` candidates (cached).

        Raises:
            ValueError: ``size`` below 2 or above :attr:`max_size`.
        """
        if isinstance(size, bool) or not isinstance(size, int) or not 2 <= size <= self.max_size:
            raise ValueError(
                f"group template {self.name!r}: a group has 2 to {self.max_size} candidates (one label each), got {size!r}; "
                "split larger groups or add labels."
            )
        if size not in self._sizes:
            labels = self.labels[:size]
            shown = self.separator.join(
                self.item.replace("{label}", label).replace("{candidate}", f"{{candidate_{k}}}")
                for k, label in enumerate(labels, 1)
            )
            fill = {"{candidates}": shown, "{n}": str(size), "{first}": labels[0], "{last}": labels[-1]}
            messages = []
            for message in self.messages:
                content = str(message.get("content", ""))
                for key, value in fill.items():
                    content = content.replace(key, value)
                messages.append({**message, "content": content})
            slots = {f"candidate_{k}": f"candidate in slot {label}" for k, label in enumerate(labels, 1)}
            data = {
                "name": f"{self.name}[{size}]", "description": self.description, "reference": self.reference,
                "language": self.language, "fields": {**self.fields, **slots}, "answers": list(labels),
                "messages": messages, "system": self.system,
            }
            self._sizes[size] = Template.from_dict(data)
        return self._sizes[size]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], default_name: str = "custom-group") -> "GroupTemplate":
        """Build a group template from its YAML mapping (see ``templates/group/*.yaml``)."""
        if not isinstance(data, Mapping):
            raise ValueError("a group template must be a mapping with name, fields, labels and messages.")
        try:
            fields, labels, messages = data["fields"], data["labels"], data["messages"]
        except KeyError as err:
            raise ValueError(f"group template {data.get('name', default_name)!r} lacks the key {err.args[0]!r}.") from None
        if isinstance(fields, (list, tuple)):
            fields = {f: "" for f in fields}
        bad = [x for x in labels if isinstance(x, bool) or not isinstance(x, (str, int))]
        if bad:
            raise ValueError(f"group template {data.get('name', default_name)!r}: label {bad[0]!r} is not a word "
                             "(YAML reads unquoted yes/no as booleans: quote it).")
        return cls(
            name=str(data.get("name", default_name)), fields=dict(fields), labels=tuple(str(x) for x in labels),
            messages=tuple(dict(m) for m in messages), item=str(data.get("item", cls.item)),
            separator=str(data.get("separator", cls.separator)), description=str(data.get("description", "")),
            reference=str(data.get("reference", "")), language=str(data.get("language", "en")),
            system=None if data.get("system") is None else str(data["system"]),
        )


def _group_dir() -> Any:
    return resources.files("pluie_reward") / "templates" / "group"


def builtin_group_template_names() -> list[str]:
    """Names of the group templates shipped with the package.

    Example:
        >>> builtin_group_template_names()
        ['para-group', 'rev-group', 'trans-group']
    """
    return sorted(p.name[: -len(".yaml")] for p in _group_dir().iterdir() if p.name.endswith(".yaml"))


def load_group_template(template: "str | Path | GroupTemplate" = "para-group") -> GroupTemplate:
    """A group template from a built-in name, a YAML path or a :class:`GroupTemplate`."""
    if isinstance(template, GroupTemplate):
        return template
    path = Path(template)
    if path.suffix in {".yaml", ".yml"}:
        if not path.is_file():
            raise FileNotFoundError(f"group template file {str(path)!r} does not exist.")
        return GroupTemplate.from_dict(yaml.safe_load(path.read_text(encoding="utf-8")), default_name=path.stem)
    resource = _group_dir() / f"{template}.yaml"
    if not resource.is_file():
        raise ValueError(f"unknown group template {str(template)!r}; built-in: {builtin_group_template_names()} (or a YAML path).")
    return GroupTemplate.from_dict(yaml.safe_load(resource.read_text(encoding="utf-8")), default_name=str(template))


def shifts(size: int, orders: int | None) -> list[int]:
    """The cyclic shifts of the ``orders`` orders of a group of ``size`` (evenly spaced; all if None).

    Raises:
        ValueError: ``orders`` not between 1 and ``size``.
    """
    if orders is None:
        return list(range(size))
    if isinstance(orders, bool) or not isinstance(orders, int) or not 1 <= orders <= size:
        raise ValueError(f"orders must be an integer from 1 to the group size {size}, got {orders!r}.")
    return sorted({(k * size) // orders for k in range(orders)})


def slot_of(candidate: int, shift: int, size: int) -> int:
    """The slot (0-based) of ``candidate`` in the order with cyclic shift ``shift``."""
    return (candidate + shift) % size


def aggregate(per_order: Sequence[Sequence[float]], order_shifts: Sequence[int]) -> list[float]:
    """``log p(best = candidate)`` from each order's log-probabilities per *slot*.

    Args:
        per_order: for each order, log p(label of slot j) for j = 0..G-1 (renormalised over the labels).
        order_shifts: each order's cyclic shift.

    Returns:
        The log-softmax over candidates of their mean log-probability across orders.

    Example:
        >>> import math
        >>> bias = [math.log(0.7), math.log(0.3)]            # the judge always says slot A, whatever it holds
        >>> [round(math.exp(v), 3) for v in aggregate([bias, bias], [0, 1])]
        [0.5, 0.5]
    """
    size = len(per_order[0])
    means = [sum(row[slot_of(i, s, size)] for row, s in zip(per_order, order_shifts)) / len(order_shifts) for i in range(size)]
    top = max(means)
    norm = top + math.log(sum(math.exp(m - top) for m in means))
    return [m - norm for m in means]


def residual_bias(slot_bias: Sequence[float], orders: int | None) -> float:
    """The largest log-probability offset a per-slot additive logit bias leaves between candidates
    after averaging over ``orders`` evenly spaced cyclic shifts (0 with all G orders).

    Args:
        slot_bias: the judge's log-probability per slot when every candidate is the same text.
        orders: number of orders (None: all).

    Returns:
        ``max_i b̄_i - min_i b̄_i`` where ``b̄_i`` is the bias candidate i receives on average.

    Example:
        >>> residual_bias([0.0, -1.0, -2.0, -3.0], 4), residual_bias([0.0, -1.0, -2.0, -3.0], 2), residual_bias([0.0, -1.0, -2.0, -3.0], 1)
        (0.0, 1.0, 3.0)
    """
    size = len(slot_bias)
    order_shifts = shifts(size, orders)
    received = [sum(slot_bias[slot_of(i, s, size)] for s in order_shifts) / len(order_shifts) for i in range(size)]
    return max(received) - min(received)


def group_fields(template: GroupTemplate, candidates: Sequence[str], order_shifts: Sequence[int],
                 values: Mapping[str, Any]) -> dict[str, list[Any]]:
    """The field columns of one group's orders: one item per order, candidate i in slot (i + shift) mod G."""
    size = len(candidates)
    columns: dict[str, list[Any]] = {name: [values[name]] * len(order_shifts) for name in template.fields}
    for slot in range(size):
        columns[f"candidate_{slot + 1}"] = [candidates[(slot - s) % size] for s in order_shifts]
    return columns


def _slot_logprobs(record: Mapping[str, Any], labels: Sequence[str]) -> list[float]:
    """Log-probabilities per slot label from a judge record (a 2-candidate group reads as Yes/No:
    ``logratio = log p(A) - log p(B)``)."""
    if "logprobs" in record:
        return [record["logprobs"][label] for label in labels]
    x = record["logratio"]
    return [-math.log1p(math.exp(-x)) if x > -30 else x, -math.log1p(math.exp(x)) if x < 30 else -x]


def judge_groups(
    judge: Any,
    template: "str | Path | GroupTemplate" = "para-group",
    groups: Sequence[Sequence[str]] = (),
    *,
    orders: int | None = None,
    **fields: Any,
) -> list[dict[str, Any]]:
    """Judge groups of candidates: ``p(best = i)`` per candidate, position bias averaged out over orders.

    All orders of all groups of one size go to :meth:`Judge.score` in one call (the judge batches
    them and shares the template's prefix).

    Args:
        judge: a :class:`~pluie_reward.Judge`.
        template: a group template (name, YAML path or :class:`GroupTemplate`).
        groups: the candidates of each group (2 to ``max_size`` strings each).
        orders: cyclic orders per group (default: all G, which cancels a per-slot bias exactly).
        fields: the template's fields, each one value per group (a list) or one value for all.

    Returns:
        One record per group: ``logp_best`` and ``p_best`` (per candidate, in the group's order),
        ``best`` (index of the most likely), ``shifts`` (the orders used) and ``per_order`` (each
        order's log-probabilities per slot, renormalised over the group's labels).

    Example:
        >>> from pluie_reward.testing import make_tiny_judge
        >>> out = judge_groups(make_tiny_judge(), "para-group", [["A cat naps.", "Dogs bark.", "The cat sleeps."]],
        ...                    source="The cat sleeps.")
        >>> round(sum(out[0]["p_best"]), 6), out[0]["shifts"]
        (1.0, [0, 1, 2])
    """
    group_template = load_group_template(template)
    n = len(groups)
    missing = [f for f in group_template.fields if f not in fields]
    unknown = [f for f in fields if f not in group_template.fields]
    if missing or unknown:
        raise ValueError(f"group template {group_template.name!r} takes the fields {list(group_template.fields)}; "
                         f"missing {missing}, unknown {unknown}.")
    columns = {}
    for name, value in fields.items():
        if isinstance(value, str) or value is None:
            value = [value] * n
        value = list(value)
        if len(value) != n:
            raise ValueError(f"field {name!r} has {len(value)} values for {n} groups.")
        columns[name] = value
    plans: dict[int, list[tuple[int, list[int]]]] = {}
    for index, group in enumerate(groups):
        if isinstance(group, str) or not isinstance(group, Sequence):
            raise TypeError(f"group {index} must be a list of candidate strings, not {type(group).__name__}.")
        group_template.for_size(len(group))  # checks the size
        plans.setdefault(len(group), []).append((index, shifts(len(group), orders)))
    results: list[dict[str, Any] | None] = [None] * n
    for size, members in plans.items():
        template_g = group_template.for_size(size)
        batch: dict[str, list[Any]] = {}
        for index, order_shifts in members:
            values = {name: columns[name][index] for name in group_template.fields}
            for name, column in group_fields(group_template, groups[index], order_shifts, values).items():
                batch.setdefault(name, []).extend(column)
        records = judge.score(template_g, details=True, **batch) if batch else []
        at = 0
        for index, order_shifts in members:
            rows = records[at: at + len(order_shifts)]
            at += len(order_shifts)
            per_order = [_slot_logprobs(row, template_g.labels) for row in rows]
            logp = aggregate(per_order, order_shifts)
            results[index] = {
                "logp_best": logp,
                "p_best": [math.exp(v) for v in logp],
                "best": max(range(size), key=logp.__getitem__),
                "shifts": list(order_shifts),
                "per_order": per_order,
            }
    return results  # type: ignore[return-value]
