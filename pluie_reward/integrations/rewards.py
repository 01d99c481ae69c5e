"""Reward functions for TRL's online trainers (GRPOTrainer, RLOOTrainer): PLUIE and novelty
(:class:`~pluie_reward.integrations.reward_base.Reward` subclasses).

PLUIE rewards what the judge accepts, and a judge accepts a copy of the source more surely than any
paraphrase: to train a generator, use the copy-proof rewards (:class:`~pluie_reward.ParaphraseReward`...,
:mod:`pluie_reward.integrations.task_rewards`), which no added novelty term can replace.

Example:
    >>> reward = PluieReward(judge, template="para-fs", fields={"source": "source"})
    >>> from trl import GRPOConfig, GRPOTrainer  # for the trainer below (TRL imports vLLM: seconds)  # doctest: +SKIP
    >>> trainer = GRPOTrainer(model=policy, reward_funcs=[reward],  # e.g. a policy trained on a judged task  # doctest: +SKIP
    ...                       args=GRPOConfig(), train_dataset=ds)
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from ..core.calibration import sigmoid
from ..core.judge import Judge
from ..core.template import load_template
from .fields import FieldMap, map_fields
from .novelty import check_sources, check_target, novelty_credit, novelty_score
from .outputs import AnswerOutput
from .reward_base import AsyncReward, Batch, Reward, Scores
from .reward_config import RewardConfig, reward_config

__all__ = ["PluieReward", "AsyncPluieReward", "NoveltyReward", "novelty"]


class JudgeHolder:
    """What every reward holding a judge shares: the judge, or a zero-argument factory that builds it on
    first use; pickling (a trainer that spawns processes pickles its rewards) keeps the factory and drops
    the built judge, and refuses a loaded judge with what to pass instead; ``copy.copy`` shares the judge.

    Example:
        >>> import functools, pickle
        >>> reward = PluieReward(functools.partial(Judge.load))   # built on first call, in each process
        >>> pickle.loads(pickle.dumps(reward)).__name__
        'pluie'
    """

    _judge: "Judge | None"
    _factory: "Callable[[], Judge] | None"

    def _hold(self, judge: "Judge | Callable[[], Judge]") -> None:
        """Keep ``judge`` (a :class:`Judge`) or the factory that builds it.

        Raises:
            TypeError: neither a Judge nor a callable.
        """
        if isinstance(judge, Judge):
            self._judge, self._factory = judge, None
        elif callable(judge):
            self._judge, self._factory = None, judge
        else:
            raise TypeError(f"judge must be a Judge or a zero-argument factory returning one, not {type(judge).__name__}.")

    @property
    def judge(self) -> Judge:
        """The judge (built by the factory on first use)."""
        if self._judge is None:
            self._judge = self._factory()
        return self._judge

    def __getstate__(self) -> dict:
        if self._factory is None:  # a loaded model does not pickle (and its weights should not travel)
            raise TypeError(f"{type(self).__name__} holds a loaded judge, which does not pickle (a trainer that spawns "
                            "processes pickles its rewards): give it a zero-argument factory instead, e.g. "
                            f"{type(self).__name__}(functools.partial(Judge.load, MODEL), ...); the judge is then built "
                            "on first call in each process.")
        state = dict(self.__dict__)
        state["_judge"] = None  # rebuilt lazily in the unpickled copy
        return state

    def __copy__(self) -> "JudgeHolder":
        """A shallow copy sharing the judge (``copy.copy``; only pickling needs a factory)."""
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        return new


class PluieReward(JudgeHolder, Reward):
    """PLUIE of each completion as a TRL reward: the completion is the template's ``hypothesis``,
    the other fields come from dataset columns (``fields`` maps field -> column; ``"prompt"`` is the
    prompt itself, its last user message when conversational). For a choice template (``net-choice``,
    ``output="prob", answer="A"``) the completion is the first candidate, ``alternative`` the second.

    Args:
        judge: a :class:`Judge`, or a zero-argument factory returning one (built on first call, and
            dropped when pickled so the reward pickles without model weights).
        template: template name, YAML path or :class:`~pluie_reward.Template`.
        fields: field -> dataset column; unmapped template fields read the column of the same name.
        clip: ``output="clip"``: PLUIE is clipped to ``[-clip, clip]`` (default 10).
        threshold: acceptance is ``PLUIE > threshold`` (default: the judge's), for ``"verdict"`` and
            the accept rate; for a scale, ``expected rating > threshold`` (default: the middle of the scale).
        name: the name TRL logs under (``rewards/<name>/mean``); default ``"pluie"``.
        output: Yes/No templates: ``"logratio"`` (PLUIE, default), ``"prob"`` (p_yes in [0, 1]),
            ``"clip"`` (PLUIE clipped to ``[-clip, clip]``), ``"calibrated"`` (the judge's
            ``p_calibrated = sigmoid(a * PLUIE + b)``; the judge needs a ``calibration``) or ``"verdict"``
            (1.0 if PLUIE > threshold, else 0.0). Templates with N answers (the default is then an
            error saying what to choose): ``"expected"`` (scale), ``"prob"`` or ``"logprob"`` of
            ``answer`` (choice or scale), renormalised over the template's answers
            (:class:`~pluie_reward.integrations.outputs.AnswerOutput`).
        answer: the answer's label for ``"prob"``/``"logprob"`` of a template with N answers (e.g. ``"A"``).
        normalize: ``output="expected"`` only: ``(rating - lowest) / (highest - lowest)`` in [0, 1].
        both_orders: choice templates only: average p(A) in the first order with p(B) in the second
            (removes position bias; 2 judge passes per completion; with ``"logprob"``, the mean of the two).
        config: all of ``output``, ``clip``, ``threshold``, ``answer``, ``normalize`` and
            ``both_orders`` as one :class:`~pluie_reward.RewardConfig` (then leave those keywords out).

    Raises:
        ValueError: an option that does not fit the template (checked here, with what to pass instead).

    It logs ``<name>/accept_rate`` and the completions-table column ``<name>/logratio`` (N answers:
    ``<name>/<output>``; accepted: the judge picks ``answer``, or the expected rating is above the threshold).

    Example:
        >>> reward = PluieReward(judge, fields={"source": "src"})
        >>> reward(prompts=["Paraphrase: The cat sleeps."], completions=["A cat is asleep."], src=["The cat sleeps."])
        [...]
        >>> prefer = PluieReward(judge, "net-choice", fields={"alternative": "reference"},
        ...                      output="prob", answer="A", both_orders=True)
        >>> same = PluieReward(judge, "net-choice", fields={"alternative": "reference"},
        ...                    config=RewardConfig(output="prob", answer="A", both_orders=True))
        >>> prefer(prompts=["Paraphrase: The cat sleeps."], completions=["A cat is asleep."], source=["The cat sleeps."],
        ...        reference=["The cat is sleeping."])  # p(the completion is the better one)
        [...]
    """

    def __init__(
        self,
        judge: "Judge | Callable[[], Judge]",
        template: Any = "para-fs",
        fields: Mapping[str, str] | None = None,
        clip: float = 10.0,
        threshold: float | None = None,
        name: str = "pluie",
        output: str = "logratio",
        answer: str | None = None,
        normalize: bool = False,
        both_orders: bool = False,
        *,
        config: RewardConfig | None = None,
    ) -> None:
        self.config = reward_config(config, name, clip=clip, threshold=threshold, output=output,
                                    answer=answer, normalize=normalize, both_orders=both_orders)
        self.template = load_template(template)
        if "hypothesis" not in self.template.fields:
            raise ValueError(
                f"template {self.template.name!r} has no 'hypothesis' field for the completion; "
                f"its fields are {list(self.template.fields)}."
            )
        # the one field -> column mapping (pluie_reward.integrations.fields), checked now against the template
        self.field_map = map_fields(
            self.template.fields, fields, optional=self.template.optional_fields, fixed={"hypothesis"},
            template=self.template.name, setting="fields", who=f"{name}: ",
        )
        self.output, self.threshold, self.clip = self.config.output, self.config.threshold, self.config.clip
        self.reading = self._reading(name)
        self.__name__ = name
        self._hold(judge)
        if self._judge is not None:
            self._calibration()

    def _reading(self, name: str) -> AnswerOutput | None:
        """The N-answer read (None for PLUIE and what is computed from it), checked against the template now.

        Args:
            name: the reward's name, for messages.

        Returns:
            The :class:`~pluie_reward.integrations.outputs.AnswerOutput` of a template with N answers, or None
            for a Yes/No template.
        """
        t, config = self.template, self.config
        if config.scale is not None:
            raise ValueError(f"{name}: scale= is for a remote judge; template {t.name!r} gives its own ratings: leave it out.")
        if t.kind == "binary" and not config.reads_answers:
            return None
        if t.kind != "binary" and config.reads_answers is False:
            what = (f"a rating scale {list(t.labels)}: pass output='expected' (the expected rating; normalize=True "
                    "for [0, 1])" if t.kind == "scale" else
                    f"a choice between {list(t.labels)}: pass output='prob' (or 'logprob') and answer= the label to "
                    f"reward, e.g. answer={t.labels[0]!r} (the completion, in the first slot, is preferred)")
            which = ("it has no PLUIE log-ratio" if config.output == "logratio"
                     else f"output={config.output!r} (read from PLUIE) does not apply")
            raise ValueError(f"{name}: template {t.name!r} has {len(t.answers)} answers, not Yes/No, so {which}; it is {what}.")
        try:
            reading = config.answer_output()  # a bare output='prob' on a template with N answers: "name it, e.g. answer='A'"
        except ValueError as err:
            raise ValueError(f"{name}: {err}") from None
        return reading.check(t.kind, t.labels, t.values, t.all_fields, t.name, who=f"{name}: ")

    def logratios(self, batch: Batch) -> tuple[list[float], float]:
        """PLUIE of each completion (one ``Judge.score`` call, the completion as ``hypothesis``) and the
        acceptance cut (:attr:`threshold`, default the judge's).

        Args:
            batch: the call's texts and fields (:meth:`~pluie_reward.integrations.reward_base.Reward.gather`).

        Returns:
            The log-ratios, in the judge's own dtype, and the cut.
        """
        judge = self.judge
        logratios = judge.score(self.template, hypothesis=batch.texts, **batch.fields)
        return logratios, judge.threshold if self.threshold is None else self.threshold

    def score_batch(self, batch: Batch) -> Scores:
        """The rewards of a batch by :attr:`output` (see the class docstring), its accept rate and the
        ``<name>/logratio`` column (``<name>/<output>`` for a template with N answers)."""
        name, n = self.__name__, len(batch.texts)
        if self.reading is not None:  # one Judge.score call of n items (2 n with both_orders)
            judge = self.judge
            if not n:
                return Scores([])
            records = judge.score(self.template, details=True, **self.reading.fields(batch.texts, batch.fields))
            rewards = self.reading.rewards(records, n)
            return Scores(rewards, {f"{name}/accept_rate": self.reading.accept_rate(records, n, self.threshold)},
                          {f"{name}/{self.output}": [round(r, 4) for r in rewards]})
        logratios, cut = self.logratios(batch)
        metrics = {f"{name}/accept_rate": sum(s > cut for s in logratios) / n} if n else {}
        return Scores([self._transform(s, cut) for s in logratios], metrics,
                      {f"{name}/logratio": [round(s, 4) for s in logratios]})

    @property
    def lowest(self) -> float | None:
        """The lowest reward: 0 for ``"prob"``, ``"calibrated"`` and ``"verdict"`` (in [0, 1]) and for
        normalised ratings, ``-clip`` for PLUIE log-ratios (below any honest score of a sane judge), the
        lowest grade for ``"expected"``; None for ``"logprob"`` (no lowest value)."""
        reading = self.reading
        if reading is None:
            return 0.0 if self.output in ("prob", "calibrated", "verdict") else -self.clip
        if reading.read == "prob" or reading.normalize:
            return 0.0
        return reading.scale[0] if reading.read == "expected" else None

    def _calibration(self) -> Any:
        """The judge's calibration, for ``output="calibrated"`` (an error saying how to get one)."""
        if self.output != "calibrated":
            return None
        calibration = getattr(self.judge, "calibration", None)
        if calibration is None:
            raise ValueError(f"{self.__name__}: output='calibrated' reads the judge's calibration, and this judge has "
                             "none: load it with Judge.load(..., calibration='calibration.json') (from `pluie-reward "
                             "calibrate` or fit_calibration(...).save(...)), or set judge.calibration.")
        return calibration

    def _transform(self, logratio: float, cut: float) -> float:
        """The reward of one PLUIE log-ratio (a Yes/No template), by :attr:`output`; ``cut``: the verdict's threshold."""
        if self.output == "calibrated":
            return self._calibration()(logratio)
        if self.output == "prob":
            return sigmoid(logratio)
        if self.output == "clip":
            return max(-self.clip, min(self.clip, logratio))
        if self.output == "verdict":
            return 1.0 if logratio > cut else 0.0
        return logratio

    def __repr__(self) -> str:
        read = f"output={self.output!r}" if self.reading is None else f"output={self.reading!r}"
        return f"PluieReward(name={self.__name__!r}, template={self.template.name!r}, fields={self.fields}, {read})"

    @property
    def fields(self) -> dict[str, str]:
        """Template field -> dataset column (the completion fills ``hypothesis``)."""
        return dict(self.field_map.columns)


class AsyncPluieReward(AsyncReward, PluieReward):
    """:class:`PluieReward` as an ``async`` reward, scored in a worker thread while TRL's other rewards
    wait on I/O. Give each model at most one async reward (a shared judge must not score concurrently with itself).

    Example:
        >>> reward = AsyncPluieReward(Judge.load("<model>", device="cuda:1"), fields={"source": "source"})  # a second GPU  # doctest: +SKIP
        >>> import asyncio
        >>> reward = AsyncPluieReward(judge, fields={"source": "source"})
        >>> asyncio.run(reward(prompts=["Paraphrase: The cat sleeps."], completions=["A cat is asleep."],
        ...                    source=["The cat sleeps."]))  # TRL awaits it
        [...]
    """


# --- novelty --------------------------------------------------------------------------------------
class NoveltyReward(Reward):
    """Novelty of each completion against a source column, as a TRL reward (picklable).

    Copying the source scores 0. A view to watch (e.g. by a :class:`~pluie_reward.HackAlarm`), not a term to add
    to PLUIE (a copy's lead outweighs it): train with a copy-proof reward (:class:`~pluie_reward.ParaphraseReward`).

    Args:
        column: the dataset column holding the source (``"prompt"``: the prompt itself).
        name: the reward's ``__name__`` (TRL logs it as ``rewards/<name>``).
        target: if given, ``min(1, novelty / target)`` instead, as a copy-proof reward counts it (the view a
            hack alarm on such a reward needs: novelty above the target earns nothing).

    Example:
        >>> reward = NoveltyReward("sentence1")
        >>> reward(completions=["The cat sleeps.", "A cat is asleep."], sentence1=["The cat sleeps."] * 2)
        [0.0, 0.75]
        >>> NoveltyReward("sentence1", target=0.3)(completions=["The cat sleeps.", "The cat sleeps!", "A cat is asleep."],
        ...                                         sentence1=["The cat sleeps."] * 3)
        [0.0, 0.0, 1.0]
    """

    def __init__(self, column: str = "source", name: str = "novelty", target: float | None = None) -> None:
        self.column = column
        self.target = None if target is None else check_target(target)
        self.__name__ = name
        self.field_map = FieldMap.explicit({"source": column}, who=f"{name}: ", hint="NoveltyReward('<column>')")

    def score_batch(self, batch: Batch) -> Scores:
        """One novelty in [0, 1] per completion (counted up to ``target`` when one is set)."""
        sources = batch.fields["source"]
        check_sources(sources, f"{self.__name__}: ", f"in column {self.column!r}")
        values = [novelty_score(s, h) for s, h in zip(sources, batch.texts)]
        return Scores(values if self.target is None else [novelty_credit(v, self.target) for v in values])

    def __repr__(self) -> str:
        target = "" if self.target is None else f", target={self.target}"
        return f"NoveltyReward(column={self.column!r}, name={self.__name__!r}{target})"


novelty = NoveltyReward("source", "novelty")
"""The novelty of each completion against the ``source`` column (e.g. a view of an :class:`~pluie_reward.AlarmedReward`)."""
