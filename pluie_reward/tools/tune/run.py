"""``tune``: from labelled pairs or a teacher judge's scores to a LoRA judge adapter on a base model.

The adapter is trained so that the student's own PLUIE score -- what :meth:`Judge.score <pluie_reward.Judge.score>`
returns from the same prompt ids in one forward pass -- follows the labels or the teacher's log-ratios (natural
threshold 0). Every score of the report goes through ``Judge.score`` (before: the base; after: with the adapter).

Placement: a plain model (``None``: the embedded SmolLM2, an id/folder or a transformers model) gets the LoRA
layers injected in place by ``get_peft_model`` (its own weights frozen; ``result.model.unload()`` gives it back);
a ``peft.PeftModel`` policy gets the adapter beside its own (trained alone, frozen, the policy's active adapter,
training flags and ``requires_grad`` restored), read by ``Judge.from_peft(policy, tokenizer, adapter_name="judge")``.

Example:
    >>> from pluie_reward.tools.tune import TuneConfig, tune
    >>> s = [f"The animal number {i} sleeps." for i in range(8)]
    >>> h, y = ["Yes a cat.", "No no dog."] * 4, [True, False] * 4
    >>> result = tune(model, tokenizer, template="para-direct", fields={"source": s, "hypothesis": h}, labels=y,
    ...               config=TuneConfig(epochs=2, progress=False), output_dir="out/judge-adapter")  # None: the embedded SmolLM2
    {'eval_loss': ..., 'epoch': '1'}
    {'eval_loss': ..., 'epoch': '2'}
    {'train_runtime': ..., 'epoch': '2'}
    >>> result.judge.score("para-direct", source=["The cat sleeps."], hypothesis=["A cat is asleep."])
    [...]
"""

from __future__ import annotations

import json
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from ...core.judge import Judge
from ...core.template import Template, load_template
from ...engines.transformers.compat import base_model, checkpointing_on, disable_checkpointing, quiet_renames
from ...engines.transformers.loading import EMBEDDED_BASE, display_name, embedded_model_dir, load_model_and_tokenizer
from ...engines.transformers.placement import belongs_to_adapter
from ...judges import default_adapter_dir
from ..shared import check_output_dir
from .config import TuneConfig
from .data import PairData, check_student_template, encode, teacher_targets
from .loss import tune_loss
from .report import evaluate_scores, write_card, write_plots
from .trainer import train_adapter


@dataclass
class TuneResult:
    """What :func:`tune` returns.

    Attributes:
        judge: the tuned judge (the adapter active while scoring).
        model: the PEFT model holding the adapter (the policy, for a policy).
        adapter_name: the adapter's name on ``model``.
        card: the report (data sizes, config, metrics before/after, loss history), as in ``pluie_tune.json``.
        output_dir: where the adapter folder was written (``None``: not saved).
        scores: per evaluation set, the student's scores ``before`` and ``after`` tuning (``Judge.score``).
    """

    judge: Judge
    model: Any
    adapter_name: str
    card: dict[str, Any]
    output_dir: Path | None = None
    scores: dict[str, dict[str, list[float]]] = field(default_factory=dict)


def template_to_dict(template: Template) -> dict[str, Any]:
    """A template as the YAML mapping :meth:`Template.from_dict` reads back (saved beside the adapter).

    Example:
        >>> t = load_template("para-direct")
        >>> Template.from_dict(template_to_dict(t)) == t
        True
    """
    data: dict[str, Any] = {
        "name": template.name,
        "description": template.description,
        "reference": template.reference,
        "language": template.language,
        "fields": {f: template.field_help.get(f, "") for f in template.fields},
        "answers": list(template.answers),
        "messages": [
            {"role": m.role, "content": m.content, **({"when": m.when} if m.when else {}), **({"generate": True} if m.generate else {})}
            for m in template.messages
        ],
        "plain": {"user": template.plain_user, "assistant": template.plain_assistant, "separator": template.plain_separator},
        "generation": {"max_new_tokens": template.max_new_tokens},
    }
    optional = {
        "optional_fields": {f: template.field_help.get(f, "") for f in template.optional_fields},
        "labels": list(template.answer_labels),
        "values": list(template.values),
        "system": template.system,
        "chat_template_kwargs": dict(template.chat_template_kwargs),
    }
    return {**data, **{k: v for k, v in optional.items() if v not in (None, [], {})}}  # the keys set only


def _is_peft(model: Any) -> bool:
    return hasattr(model, "peft_config") and hasattr(model, "add_adapter") and hasattr(model, "get_base_model")


def _loadable_name(model: Any) -> str | None:
    """What ``Judge.load`` loads this base from: ``"embedded-base"``, ``_name_or_path`` or a placeholder."""
    base = base_model(model)
    path = getattr(getattr(base, "config", None), "_name_or_path", "") or ""
    try:
        if path and Path(path).resolve() == embedded_model_dir().resolve():
            return EMBEDDED_BASE
    except (ModuleNotFoundError, FileNotFoundError, OSError):
        pass
    return path or f"<your {type(base).__name__}>"


def save_adapter(model: Any, adapter_name: str, directory: Path) -> None:
    """Save one PEFT adapter as a flat folder (``adapter_config.json`` + weights at the top), whatever its name
    (PEFT writes an adapter other than ``"default"`` into a sub-folder; its files are moved up)."""
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=directory, prefix=".saving-") as scratch:
        model.save_pretrained(scratch, selected_adapters=[adapter_name])
        source = Path(scratch) / adapter_name if adapter_name != "default" else Path(scratch)
        for item in source.iterdir():
            if item.is_file():
                shutil.move(str(item), directory / item.name)


def _score(judge: Judge, template: Template, data: PairData, truncate: bool) -> list[float]:
    columns = {f: v for f, v in data.columns.items() if f in template.all_fields}
    return [float(s) for s in judge.score(template, truncate=truncate, **columns)]


def _loss(scores: Sequence[float], data: PairData, config: TuneConfig) -> float:
    import torch

    labels = None if data.labels is None else torch.tensor(data.labels.astype(float))
    targets = None if data.targets is None else torch.tensor(data.targets)
    return float(tune_loss(torch.tensor(list(scores)), labels, targets, loss=config.resolved_loss(),
                           temperature=config.temperature, label_weight=config.label_weight))


def tune(
    model: Any = None,
    tokenizer: Any = None,
    *,
    template: "str | Path | Template" = "para-direct",
    fields: Mapping[str, Sequence[str]],
    labels: Sequence[Any] | None = None,
    targets: Sequence[float] | None = None,
    contrast: Sequence[Mapping[str, str] | None] | None = None,
    teacher: Judge | None = None,
    teacher_template: "str | Path | Template | None" = None,
    eval_sets: Mapping[str, PairData] | None = None,
    config: TuneConfig | None = None,
    output_dir: "str | Path | None" = None,
    overwrite: bool = False,
    model_name: str | None = None,
) -> TuneResult:
    """Tune a LoRA judge adapter so that the student's PLUIE follows labels and/or a teacher.

    Args:
        model: the student's base: ``None`` (embedded SmolLM2-135M-Instruct), an HF id or folder, a
            transformers causal LM, or a ``peft.PeftModel`` policy (the adapter is added beside its own).
        tokenizer: the model's tokenizer (loaded with the model when ``model`` is a name).
        template: the student's Yes/No template (read in one forward pass).
        fields: the training pairs as template fields, e.g. ``{"source": [...], "hypothesis": [...]}``.
        labels: binary labels, one per pair.
        targets: teacher log-ratios, one per pair (or give ``teacher``).
        contrast: per pair ``None`` or the fields of a pair that should outscore it by
            ``config.contrast_margin`` (e.g. the honest paraphrase a meaning flip was made from): adds
            the pairwise term of :func:`~pluie_reward.tools.tune.loss.contrast_loss` to its loss.
        teacher: a :class:`~pluie_reward.Judge` computing the targets (of the training pairs and of
            evaluation sets without targets) with ``teacher_template`` (default: ``template``).
        eval_sets: more evaluation sets by name (:class:`~pluie_reward.tools.tune.data.PairData`),
            reported like the held-out pairs.
        config: the hyper-parameters (:class:`~pluie_reward.tools.tune.config.TuneConfig`).
        output_dir: write the adapter folder there (adapter + ``template.yaml`` + card + plots).
        overwrite: allow a non-empty ``output_dir``.
        model_name: the base model's name for the card (default: ``model`` or the embedded name).

    Returns:
        A :class:`TuneResult` (tuned judge, PEFT model, card).

    Example:
        >>> s = [f"The animal number {i} sleeps." for i in range(8)]
        >>> h = ["Yes a cat.", "No no dog."] * 4
        >>> result = tune(model, tokenizer, template="para-direct", fields={"source": s, "hypothesis": h},
        ...               teacher=judge, teacher_template="para-fs", output_dir="out/adapter",  # e.g. teacher=Judge.load()
        ...               config=TuneConfig(epochs=2, progress=False))
        {'eval_loss': ..., 'epoch': '1'}
        {'eval_loss': ..., 'epoch': '2'}
        {'train_runtime': ..., 'epoch': '2'}
        >>> sorted(p.name for p in result.output_dir.iterdir())[:3]
        ['README.md', 'adapter_config.json', 'adapter_model.safetensors']
    """
    config = config or TuneConfig()
    if not isinstance(config, TuneConfig):
        raise TypeError(f"config must be a TuneConfig, not {type(config).__name__}.")
    t = load_template(template)
    out = check_output_dir(output_dir, "output_dir", empty=not overwrite, overwrite="overwrite=True", error=ValueError)
    if teacher is not None and targets is not None:
        raise ValueError("give teacher targets either as `targets` or through a `teacher`, not both.")
    if labels is None and targets is None and teacher is None:
        raise ValueError("nothing to learn from: give labels, teacher targets (targets=...) or a teacher judge.")
    if teacher_template is not None and teacher is None:
        raise ValueError("teacher_template needs a teacher judge (teacher=...).")
    if config.resolved_loss() == "mse" and targets is None and teacher is None:
        raise ValueError("loss='mse' is on teacher log-ratios; with labels only use loss='bce' (or 'auto').")
    data = PairData.build(t, fields, labels, targets, contrast)
    eval_sets = dict(eval_sets or {})
    for name, ev in eval_sets.items():
        if not isinstance(ev, PairData):
            raise TypeError(f"eval_sets[{name!r}] must be a PairData (PairData.build(template, fields, labels, targets)).")
        missing = [f for f in t.fields if f not in ev.columns]
        if missing:
            raise ValueError(f"eval_sets[{name!r}] lacks the field(s) {missing}.")

    # the student before tuning, and the exact prompt ids it reads
    if model is None or isinstance(model, (str, Path)):
        # None: a new adapter on the untuned embedded model (the default judge already has one, merged)
        load_name = EMBEDDED_BASE if model is None else str(model)
        model, tokenizer = load_model_and_tokenizer(load_name, default_adapter=default_adapter_dir())
    elif tokenizer is None:
        raise TypeError("tune(model, tokenizer): a model object needs its tokenizer.")
    else:
        load_name = _loadable_name(model)
    model_name = model_name or display_name(load_name, default_adapter=default_adapter_dir())
    policy = _is_peft(model)
    if policy and config.adapter_name in model.peft_config:
        raise ValueError(f"the policy already has an adapter named {config.adapter_name!r}; choose another adapter_name.")
    before_judge = Judge.from_peft(model, tokenizer) if policy else Judge(model, tokenizer, name=model_name)
    bound = before_judge.bind(t)
    check_student_template(bound)

    # teacher targets (all of them before the student's weights get an adapter: the teacher may share them)
    teacher_name = None
    if teacher is not None:
        teacher_t = load_template(teacher_template if teacher_template is not None else t)
        teacher_name = f"{teacher.name} with {teacher_t.name!r}"
        data = data.with_targets(teacher_targets(teacher, teacher_t, data, progress=config.progress, desc="teacher (training pairs)"))
        for name, ev in list(eval_sets.items()):
            if ev.targets is None:
                targets = teacher_targets(teacher, teacher_t, ev, progress=config.progress, desc=f"teacher ({name})")
                eval_sets[name] = ev.with_targets(targets)
    train, heldout = data.split(config.heldout_fraction, config.seed)
    evaluations = {"held-out": heldout, **eval_sets} if len(heldout) else dict(eval_sets)
    before = {name: _score(before_judge, t, ev, config.truncate) for name, ev in evaluations.items()}

    # the adapter
    train_ds = encode(bound, train, config.truncate)
    heldout_ds = encode(bound, heldout, config.truncate) if len(heldout) else None
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    name = config.adapter_name
    with trainable_adapter(model, config) as peft_model:
        history = train_adapter(peft_model, train_ds, heldout_ds, tuple(a[0] for a in bound.answer_ids), config, int(pad or 0))

    tuned = Judge.from_peft(peft_model, tokenizer, adapter_name=name, name=f"{model_name}+{name}")
    after = {k: _score(tuned, t, ev, config.truncate) for k, ev in evaluations.items()}

    report = {k: _evaluate(ev, before[k], after[k], config) for k, ev in evaluations.items()}
    supervision = " and ".join(
        s for s, on in (("labels", data.labels is not None),
                        (f"teacher log-ratios ({teacher_name or 'given'})", data.targets is not None)) if on
    )
    card: dict[str, Any] = {
        "template": t.name,
        "chat_template_kwargs": bound.chat_template_kwargs,
        "base_model": model_name,
        "load_model": load_name,
        "adapter_name": name,
        "placement": "added to a PEFT policy" if policy else "LoRA on the base model",
        "supervision": supervision,
        "teacher": teacher_name,
        "loss": _describe_loss(config, data),
        "data": {"train": len(train), "heldout": len(heldout), "eval": {k: len(v) for k, v in eval_sets.items()}},
        "config": config.to_dict(),
        "evaluation": report,
        "history": history,
    }
    from accelerate import PartialState  # under `accelerate launch`, one process of several writes the folder

    if out is not None and PartialState().is_main_process:
        _save(out, peft_model, name, t, card, evaluations, before, after)
    scores = {k: {"before": before[k], "after": after[k]} for k in evaluations}
    return TuneResult(judge=tuned, model=peft_model, adapter_name=name, card=card, output_dir=out, scores=scores)


@contextmanager
def trainable_adapter(model: Any, config: TuneConfig) -> Iterator[Any]:
    """A new LoRA adapter ``config.adapter_name`` on ``model``, the only trainable weights inside the block, frozen
    afterwards (placement as in the module docstring; gradient checkpointing the Trainer switched on is switched off).

    Example:
        >>> with trainable_adapter(model, TuneConfig()) as peft_model:  # a plain model: wrapped in place
        ...     peft_model.active_adapter  # train it here, e.g. with train_adapter(peft_model, ...)
        'judge'
        >>> any(p.requires_grad for p in peft_model.parameters())  # frozen afterwards
        False
    """
    from peft import get_peft_model
    from transformers import set_seed

    set_seed(config.seed)  # the LoRA initialisation
    name = config.adapter_name
    policy = _is_peft(model)
    modes = [(m, m.training) for m in model.modules()]
    flags = [(p, p.requires_grad) for p in model.parameters()]
    checkpointing = checkpointing_on(model)
    previous = model.active_adapter if policy else None
    if policy:
        model.add_adapter(name, config.lora_config())
        model.set_adapter(name)  # only this adapter trainable (peft/peft_model.py: PeftModel.set_adapter)
        peft_model = model
    else:
        with quiet_renames():
            peft_model = get_peft_model(model, config.lora_config(), adapter_name=name)
    try:
        yield peft_model
    finally:
        for module, mode in modes:
            module.training = mode
        if policy:
            model.set_adapter(previous)
            for parameter, flag in flags:
                parameter.requires_grad_(flag)
        else:  # a plain base stays as get_peft_model leaves it (frozen), in eval mode
            peft_model.eval()
        for n, p in peft_model.named_parameters():
            if belongs_to_adapter(n, (name,)):
                p.requires_grad_(False)
        if config.gradient_checkpointing and not checkpointing:
            disable_checkpointing(peft_model)


def _evaluate(data: PairData, before: Sequence[float], after: Sequence[float], config: TuneConfig) -> dict[str, Any]:
    """Before/after metrics of one evaluation set (+ the teacher's own classification when it has labels)."""
    report: dict[str, Any] = {}
    for when, scores in (("before", before), ("after", after)):
        metrics = evaluate_scores(scores, data.labels, data.targets)
        if data.targets is not None or (data.labels is not None and config.resolved_loss() != "mse"):
            metrics["loss"] = _loss(scores, data, config)
        report[when] = metrics
    if data.labels is not None and data.targets is not None:
        report["teacher"] = evaluate_scores(data.targets, data.labels)
    return report


def _describe_loss(config: TuneConfig, data: PairData) -> str:
    parts = []
    if data.targets is not None:
        parts.append("(s - t)^2" if config.resolved_loss() == "mse"
                     else f"T^2 BCE(sigmoid(s/T), sigmoid(t/T)) with T = {config.temperature:g}")
    if data.labels is not None:
        parts.append("BCE(sigmoid(s), label)")
    text = f"{1 - config.label_weight:g} * {parts[0]} + {config.label_weight:g} * {parts[1]}" if len(parts) == 2 else parts[0]
    if data.contrast is not None and config.contrast_weight and any(c is not None for c in data.contrast):
        text += (f" + {config.contrast_weight:g} * softplus({config.contrast_margin:g} - (s_contrast - s)) on the "
                 f"{sum(c is not None for c in data.contrast)} pairs with a contrast")
    return text


def _save(out: Path, model: Any, name: str, template: Template, card: dict[str, Any], evaluations: Mapping[str, PairData],
          before: Mapping[str, list[float]], after: Mapping[str, list[float]]) -> None:
    import yaml

    save_adapter(model, name, out)
    (out / "template.yaml").write_text(
        yaml.safe_dump(template_to_dict(template), sort_keys=False, allow_unicode=True), encoding="utf-8"
    )
    with (out / "scores.jsonl").open("w", encoding="utf-8") as handle:
        for k, ev in evaluations.items():
            for i in range(len(ev)):
                row: dict[str, Any] = {"set": k, **{f: v[i] for f, v in ev.columns.items()},
                                       "before": before[k][i], "after": after[k][i]}
                if ev.targets is not None:
                    row["teacher"] = float(ev.targets[i])
                if ev.labels is not None:
                    row["label"] = bool(ev.labels[i])
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    plots: list[str] = []
    for k, ev in evaluations.items():
        if ev.labels is not None:
            truth, what = ev.labels, "labels"
        elif ev.targets is not None:
            truth, what = np.asarray(ev.targets) > 0, "the teacher's verdicts"
        else:
            continue
        plots += write_plots(out, k.replace(" ", "_"), before[k], after[k], truth, what)
    card["plots"] = plots
    write_card(out, card)
