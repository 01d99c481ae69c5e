"""The trained quantity and its losses: PLUIE read from one forward pass, with gradients.

:func:`pluie_scores` is, for right-padded prompt ids, ``logit[yes] - logit[no]`` at each row's last prompt
position: the value :meth:`Judge.score <pluie_reward.Judge.score>` returns for a Yes/No template with single-token
answers (the log-normaliser cancels), so a tuned judge's score at the threshold 0 is the quantity the loss shaped.

Example:
    >>> import torch
    >>> s = torch.tensor([2.0, -1.0])
    >>> round(float(tune_loss(s, labels=torch.tensor([1.0, 0.0]))), 4)
    0.2201
    >>> float(tune_loss(s, targets=torch.tensor([2.0, -1.0]), loss="mse"))
    0.0
    >>> round(float(contrast_loss(torch.tensor([-1.0]), torch.tensor([1.0]), margin=2.0)), 4)  # gap 2 = margin: log 2
    0.6931
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
import torch.nn.functional as F

from ...engines.transformers.compat import cache_argument, forward_parameters, output_cache


def pluie_scores(
    model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, answer_ids: Sequence[int], shared_prefix: int = 0
) -> torch.Tensor:
    """``logit[yes] - logit[no]`` at the last real position of each right-padded row (differentiable).

    Args:
        model: a causal LM (or a PEFT model around one), in whatever mode the caller wants.
        input_ids: (rows, width) prompt ids, right-padded.
        attention_mask: (rows, width), 1 on real tokens (a prefix of each row).
        answer_ids: the two answer token ids ``(yes, no)``.
        shared_prefix: leading tokens every row shares (the template's instructions), run once as a one-row
            forward whose key/value cache (with its gradients) the rows continue from; each row needs a token after.

    Returns:
        A float32 tensor of one score per row.

    Example:
        >>> from pluie_reward.tools.tune.data import PairCollator, PairData, encode
        >>> bound = judge.bind("para-direct")
        >>> data = PairData.build(bound.template, {"source": ["The cat sleeps.", "Prices rose."],
        ...                                        "hypothesis": ["A cat is asleep.", "Prices fell."]}, labels=[True, False])
        >>> batch = PairCollator(tokenizer.pad_token_id)(list(encode(bound, data)))
        >>> yes_no = tuple(a[0] for a in bound.answer_ids)  # (10539, 5230) for SmolLM2
        >>> pluie_scores(model, batch["input_ids"], batch["attention_mask"], yes_no)
        tensor([..., ...], grad_fn=<SubBackward0>)
    """
    yes, no = int(answer_ids[0]), int(answer_ids[1])
    lengths = attention_mask.sum(dim=-1)
    rows = input_ids.shape[0]
    if int(lengths.min()) <= shared_prefix:
        raise ValueError(f"every row needs a token after the shared prefix of {shared_prefix} tokens.")
    takes_keep = "logits_to_keep" in forward_parameters(model)  # the LM head on a few positions
    kwargs: dict[str, Any] = {"use_cache": False}
    if shared_prefix:
        if not bool((input_ids[:, :shared_prefix] == input_ids[:1, :shared_prefix]).all()):
            raise ValueError("the rows do not share their first shared_prefix tokens.")
        head = model(input_ids=input_ids[:1, :shared_prefix], use_cache=True, **({"logits_to_keep": 1} if takes_keep else {}))
        cache = output_cache(head)
        cache.batch_repeat_interleave(rows)
        positions = torch.arange(shared_prefix, input_ids.shape[1], device=input_ids.device).expand(rows, -1)
        kwargs = {cache_argument(model): cache, "position_ids": positions, "use_cache": True}
        input_ids = input_ids[:, shared_prefix:]
        lengths = lengths - shared_prefix
    width = input_ids.shape[1]
    if takes_keep:
        kwargs["logits_to_keep"] = width - int(lengths.min()) + 1
    logits = model(input_ids=input_ids, attention_mask=attention_mask, **kwargs).logits
    kept = logits.shape[1]  # the last `kept` positions (all of them without logits_to_keep)
    index = lengths - 1 - (width - kept)
    last = logits[torch.arange(rows, device=logits.device), index.to(logits.device)].float()
    return last[:, yes] - last[:, no]


def tune_loss(
    scores: torch.Tensor,
    labels: torch.Tensor | None = None,
    targets: torch.Tensor | None = None,
    *,
    loss: str = "bce",
    temperature: float = 1.0,
    label_weight: float = 0.5,
) -> torch.Tensor:
    """The loss of :class:`~pluie_reward.tools.tune.config.TuneConfig` on a batch of scores (mean over rows).

    Args:
        scores: the student's PLUIE scores ``s``.
        labels: 1/0 floats ``y``: ``BCE(sigmoid(s), y)``.
        targets: teacher log-ratios ``t``: ``T² BCE(sigmoid(s/T), sigmoid(t/T))`` (``loss="bce"``) or ``(s - t)²`` (``"mse"``).
        label_weight: with both, ``label_weight * label loss + (1 - label_weight) * teacher loss``.

    Returns:
        A scalar tensor.

    Example:
        >>> s = torch.zeros(2)
        >>> round(float(tune_loss(s, targets=torch.tensor([0.0, 0.0]))), 4)   # log 2: the entropy of p = 0.5
        0.6931
    """
    if labels is None and targets is None:
        raise ValueError("tune_loss needs labels, targets or both.")
    if loss not in ("bce", "mse"):
        raise ValueError(f"loss must be 'bce' or 'mse', got {loss!r}.")
    scores = scores.float()
    parts = []
    if labels is not None:
        parts.append((label_weight if targets is not None else 1.0, F.binary_cross_entropy_with_logits(scores, labels.float())))
    if targets is not None:
        t = targets.float()
        if loss == "mse":
            teacher = ((scores - t) ** 2).mean()
        else:
            T = float(temperature)
            teacher = T * T * F.binary_cross_entropy_with_logits(scores / T, torch.sigmoid(t / T))
        parts.append((1.0 - label_weight if labels is not None else 1.0, teacher))
    return sum(w * value for w, value in parts)


def contrast_loss(scores: torch.Tensor, contrast_scores: torch.Tensor, margin: float) -> torch.Tensor:
    """The pairwise term ``mean softplus(margin - (contrast - score))``: small once each contrast item (e.g. the
    honest paraphrase) outscores its item (a meaning flip of it) by more than ``margin``; it moves only their gap.

    Args:
        scores: the items' scores (the ones that should be lower).
        contrast_scores: their contrast items' scores, row for row.
        margin: the gap, in nats, from which the term fades (softplus: it never quite reaches 0).

    Returns:
        A scalar tensor.

    Example:
        >>> round(float(contrast_loss(torch.tensor([0.0, 0.0]), torch.tensor([6.0, -6.0]), margin=0.0)), 4)
        3.0025
    """
    return F.softplus(margin - (contrast_scores.float() - scores.float())).mean()
