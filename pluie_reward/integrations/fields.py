"""Which text fills which template field, for every integration, local and remote.

- :func:`completion_text` (and :func:`prompt_text`): a TRL completion or prompt (a string, or chat
  messages) as the text the judge reads, for every local and remote reward.
- :func:`map_fields` / :class:`FieldMap`: template field -> column (of a TRL batch, a dataset, an input
  file, an OpenRLHF request or verl's arguments), with one wording of the errors, named by the setting
  the user writes the mapping in (``fields={...}``, ``--column FIELD=COLUMN``...).

Standard library only, so the HTTP client imports it with httpx alone.

Example:
    >>> completion_text([{"role": "assistant", "content": "A cat is asleep."}])
    'A cat is asleep.'
    >>> fm = map_fields(["source", "hypothesis"], {"source": "s1"}, fixed={"hypothesis"}, setting="fields")
    >>> fm.columns
    {'source': 's1'}
    >>> fm.gather({"s1": ["The cat sleeps."]}, 1)
    {'source': ['The cat sleeps.']}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Collection, Iterable, Mapping, Sequence

from ..common.errors import PluieError

# keyword arguments TRL's GRPO/RLOO trainers add to the dataset columns when calling a reward; not columns
TRAINER_KWARGS = frozenset({"trainer_state", "log_extra", "log_metric", "completion_ids", "environments"})
PROMPT_COLUMN = "prompt"


class MissingColumnError(PluieError, KeyError, ValueError):
    """A template field's column is not there. A ``KeyError`` (as for a missing dict key, what TRL
    rewards raise) and a ``ValueError`` (bad input, for callers that catch that).

    Example:
        >>> str(MissingColumnError("no column 'x'"))
        "no column 'x'"
    """

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


# completions and prompts -------------------------------------------------------------------------
def content_text(content: Any, index: int = 0, what: str = "completion") -> str:
    """A chat message's content as text: a string, or the text blocks of a list of content blocks
    (``{"type": "text", "text": ...}``; images and other blocks are skipped); ``None`` is ``""``.

    Example:
        >>> content_text([{"type": "text", "text": "Hi"}, {"type": "image"}, {"type": "text", "text": "!"}])
        'Hi!'
    """
    if content is None:
        return ""  # e.g. an assistant turn holding only tool calls
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "".join(block.get("text") or "" for block in content if isinstance(block, Mapping) and block.get("type", "text") == "text")
    raise TypeError(f"{what} {index}: message content must be a string or a list of blocks, got {type(content).__name__}.")


def _messages(value: Any) -> list[Mapping[str, Any]] | None:
    if isinstance(value, Mapping):
        return [value]
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)) and all(isinstance(m, Mapping) for m in value):
        return list(value)
    return None


def completion_texts(completions: Sequence[Any] | None, owner: str) -> list[str]:
    """The text of each of TRL's completions (:func:`completion_text`), for a reward called ``owner``.

    Raises:
        TypeError: ``completions`` was not passed (a reward is called with ``completions=[...]``), or is not a
            list of completions: a string (which would be scored character by character), bytes, one chat
            message (a dict), a number.

    Example:
        >>> completion_texts(["A cat.", [{"role": "assistant", "content": "A dog."}]], "pluie")
        ['A cat.', 'A dog.']
        >>> completion_texts("A cat.", "pluie")  # doctest: +NORMALIZE_WHITESPACE
        Traceback (most recent call last):
        ...
        TypeError: pluie: completions must be a list with one completion per sample, got a str ('A cat.');
        for one completion pass completions=['A cat.'].
    """
    if completions is None:
        raise TypeError(f"{owner}: call it with completions=[...] (TRL's reward contract).")
    if isinstance(completions, (str, bytes, Mapping)) or not isinstance(completions, Iterable):
        shown = repr(completions)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        raise TypeError(f"{owner}: completions must be a list with one completion per sample, got a "
                        f"{type(completions).__name__} ({shown}); for one completion pass completions=[{shown}].")
    return [completion_text(c, i) for i, c in enumerate(completions)]


def completion_text(completion: Any, index: int = 0) -> str:
    """The text of one completion: a string as it is; for chat messages, the content of the **last
    assistant message** that has content (the final answer: earlier assistant turns of a tool-calling
    completion, and tool results, are not part of it). No assistant text gives ``""``.

    Args:
        completion: a string, one message dict, or a list of message dicts (``role`` defaults to
            ``"assistant"``; ``content`` a string or a list of content blocks).
        index: the completion's position, for error messages.

    Returns:
        The text the judge reads as the hypothesis.

    Example:
        >>> completion_text("A cat is asleep.")
        'A cat is asleep.'
        >>> completion_text([{"role": "assistant", "content": "Hello."}, {"role": "tool", "content": "42"},
        ...                  {"role": "assistant", "content": "World."}])
        'World.'
        >>> completion_text([{"role": "assistant", "content": [{"type": "text", "text": "Hi"}]}])
        'Hi'
    """
    if isinstance(completion, str):
        return completion
    if completion is None:
        raise TypeError(
            f"completion {index} is None; a reward needs the generated text (a string, or a list of chat "
            "messages for conversational datasets)."
        )
    messages = _messages(completion)
    if messages is None:
        raise TypeError(f"completion {index}: expected a string or a list of chat messages, got {type(completion).__name__}.")
    for message in reversed(messages):
        if message.get("role", "assistant") == "assistant" and message.get("content") is not None:
            return content_text(message.get("content"), index)
    return ""


def prompt_text(prompt: Any, index: int = 0) -> str:
    """A prompt as text: a string as it is; for chat messages, the content of the **last user
    message** (the request being answered; earlier turns are context), or of the last message when
    no message is from the user.

    Example:
        >>> prompt_text([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
        ...              {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Paraphrase: A."}])
        'Paraphrase: A.'
    """
    if isinstance(prompt, str):
        return prompt
    messages = _messages(prompt)
    if not messages:
        raise TypeError(f"prompt {index}: expected a string or a list of chat messages, got {type(prompt).__name__}.")
    users = [m for m in messages if m.get("role") == "user"]
    return content_text((users or messages)[-1].get("content"), index, what="prompt")


# field -> column ---------------------------------------------------------------------------------
def mapping_hint(setting: str, field_name: str, what: str = "column") -> str:
    """How to map ``field_name`` in the setting the user writes mappings in.

    Example:
        >>> mapping_hint("fields", "source")
        "fields={'source': '<column>'}"
        >>> mapping_hint("--column", "source")
        '--column source=<column>'
    """
    if setting.startswith("--"):
        return f"{setting} {field_name}=<{what}>"
    return f"{setting}={{{field_name!r}: '<{what}>'}}"


def parse_assignments(specs: Iterable[str], setting: str = "--column", key: str = "FIELD") -> dict[str, str]:
    """Repeated ``FIELD=COLUMN`` command-line values as a dict; a field given twice is an error (not
    "the last one wins"). ``FIELD=`` (nothing after ``=``) maps the field to ``""``: :func:`map_fields`
    then leaves that optional field out. ``key``: what the setting's messages call a field (``"ROLE"``).

    Example:
        >>> parse_assignments(["source=s1", "hypothesis = s2", "gold="])
        {'source': 's1', 'hypothesis': 's2', 'gold': ''}
    """
    mapping: dict[str, str] = {}
    for spec in specs:
        if "=" not in spec:
            raise ValueError(f"{setting} expects {key}=COLUMN, got {spec!r}.")
        name, column = (part.strip() for part in spec.split("=", 1))
        if not name:
            raise ValueError(f"{setting} expects {key}=COLUMN with a {key.lower()} name, got {spec!r}.")
        if name in mapping:
            raise ValueError(f"{setting} {name} is given twice ({name}={mapping[name]} and {name}={column}); give it once.")
        mapping[name] = column
    return mapping


def _listing(names: Iterable[str]) -> list[str]:
    names = list(dict.fromkeys(names))
    return sorted(n for n in names if n != PROMPT_COLUMN) + ([PROMPT_COLUMN] if PROMPT_COLUMN in names else [])


@dataclass(frozen=True)
class FieldMap:
    """Template field -> column, and which of them must be present.

    Build it with :func:`map_fields` (checked against a template) or :meth:`explicit`.

    Attributes:
        columns: field -> column for every field that may be read.
        required: the fields whose column must be present (the others, optional template fields
            not mapped explicitly, are read only when their column is there).
        setting: how the user writes mappings (``"fields"``, ``"columns"``, ``"--column"`` ...), for errors.
        what: what a column is called in this setting (``"column"``, ``"source"``, ``"key"``).
        who: prefix of error messages (e.g. the reward's name).
    """

    columns: dict[str, str]
    required: frozenset[str]
    setting: str = "fields"
    what: str = "column"
    who: str = ""
    hint: str | None = field(default=None, compare=False)

    @classmethod
    def explicit(
        cls, columns: Mapping[str, str], setting: str = "fields", what: str = "column", who: str = "", hint: str | None = None
    ) -> "FieldMap":
        """Every given field is required (no template to check against, e.g. a remote judge's).

        Example:
            >>> FieldMap.explicit({"source": "src"}).select(["src", "other"])
            {'source': 'src'}
        """
        return cls(dict(columns), frozenset(columns), setting, what, who, hint)

    def _hint(self, field_name: str) -> str:
        if self.hint is not None:
            return self.hint.format(field=field_name, what=self.what)
        return mapping_hint(self.setting, field_name, self.what)

    def missing(self, available: Collection[str]) -> list[str]:
        """Required fields whose column is not in ``available``, in field order."""
        return [f for f, c in self.columns.items() if f in self.required and c not in available]

    def select(self, available: Collection[str], where: str = "the batch", addable: bool = True) -> dict[str, str]:
        """Field -> column for the columns in ``available``: every required field, and the optional
        fields whose column is there. :class:`MissingColumnError` names a missing one, lists
        ``available`` and says how to map it.

        Example:
            >>> fm = map_fields(["source", "hypothesis"], setting="columns")
            >>> fm.select(["hypothesis", "src"], where="the dataset")  # doctest: +NORMALIZE_WHITESPACE
            Traceback (most recent call last):
            ...
            pluie_reward.integrations.fields.MissingColumnError: template field 'source' reads the column 'source', which is not in the
            dataset. Available columns: ['hypothesis', 'src']. Pass columns={'source': '<column>'}, or add the column.
        """
        missing = self.missing(available)
        if missing:
            f = missing[0]
            raise MissingColumnError(
                f"{self.who}template field {f!r} reads the {self.what} {self.columns[f]!r}, which is not in {where}. "
                f"Available {self.what}s: {_listing(available)}. Pass {self._hint(f)}"
                + (f", or add the {self.what}." if addable else ".")
            )
        return {f: c for f, c in self.columns.items() if c in available}

    def gather(
        self,
        batch: Mapping[str, Any],
        n: int | None = None,
        *,
        prompts: Sequence[Any] | None = None,
        exclude: Collection[str] = TRAINER_KWARGS,
        where: str = "the batch",
        per: str = "completions",
    ) -> dict[str, list[Any]]:
        """The selected columns of ``batch`` as field -> list of values.

        Args:
            batch: column -> values (e.g. the keyword arguments TRL passes a reward).
            n: the expected number of values per column (``ValueError`` otherwise).
            prompts: TRL's prompts; the ``"prompt"`` column reads them through :func:`prompt_text`
                unless the batch has its own ``prompt`` column.
            exclude: keys of ``batch`` that are not columns (TRL's trainer arguments).
            where, per: wording of errors.

        Example:
            >>> FieldMap.explicit({"source": "prompt"}).gather({}, 1, prompts=[[{"role": "user", "content": "Hi"}]])
            {'source': ['Hi']}
            >>> FieldMap.explicit({"source": "src"}).gather({"src": "abc"}, 3)
            Traceback (most recent call last):
            ...
            TypeError: column 'src' is one string, not one value per completion: pass a list ([text] * 3 to give every one the same text).
        """
        available = [k for k in batch if k not in exclude]
        if prompts is not None:
            available.append(PROMPT_COLUMN)
        selected = self.select(available, where)
        values: dict[str, list[Any]] = {}
        for f, column in selected.items():
            if column in batch and column not in exclude:
                if isinstance(batch[column], (str, bytes)):  # list() would read it as characters
                    count = n if n is not None else "n"
                    raise TypeError(f"{self.who}{self.what} {column!r} is one string, not one value per {per[:-1]}: pass a "
                                    f"list ([text] * {count} to give every one the same text).")
                values[f] = list(batch[column])
            else:  # the prompt itself
                values[f] = [prompt_text(p, i) for i, p in enumerate(prompts or [])]
            if n is not None and len(values[f]) != n:
                raise ValueError(f"{self.who}{self.what} {column!r} has {len(values[f])} values for {n} {per}.")
        return values


def map_fields(
    fields: Sequence[str],
    mapping: Mapping[str, str] | None = None,
    *,
    optional: Sequence[str] = (),
    fixed: Collection[str] = (),
    defaults: Mapping[str, str] | None = None,
    template: str | None = None,
    setting: str = "fields",
    what: str = "column",
    who: str = "",
) -> FieldMap:
    """The one field -> column mapping: ``mapping`` first, then ``defaults``, then the column named
    like the field. An optional field mapped to ``""`` (``FIELD=`` on a command line) is left out.

    Args:
        fields: the template's required fields; ``optional``: its optional fields.
        mapping: what the user gave (field -> column); its keys must be template fields.
        fixed: fields the integration fills itself (e.g. ``hypothesis``, the completion); mapping
            them is an error and they are left out.
        defaults: columns other than the field's own name by default (e.g. OpenRLHF's ``source`` <- ``label``).
        template: the template's name, for errors.
        setting, what, who: wording of errors (see :class:`FieldMap`).

    Returns:
        A :class:`FieldMap`: required fields, and optional ones (required too when mapped explicitly).

    Example:
        >>> fm = map_fields(["original", "instruction", "hypothesis"], {"original": "p1"}, optional=["gold"],
        ...                 fixed={"hypothesis"}, template="rev")
        >>> fm.columns, sorted(fm.required)
        ({'original': 'p1', 'instruction': 'instruction', 'gold': 'gold'}, ['instruction', 'original'])
        >>> map_fields(["original"], {"gold": ""}, optional=["gold"]).columns  # left out
        {'original': 'original'}
        >>> map_fields(["source", "hypothesis"], {"src": "s1"}, template="para-fs", setting="--column")
        Traceback (most recent call last):
        ...
        ValueError: --column: 'src' is not a field of template 'para-fs'; its fields are ['source', 'hypothesis'].
    """
    mapping = dict(mapping or {})
    defaults = dict(defaults or {})
    known = [f for f in list(fields) + list(optional)]
    named = f"template {template!r}" if template else "the template"
    unknown = [f for f in mapping if f not in known]
    if unknown:
        plural = "are not fields" if len(unknown) > 1 else "is not a field"
        shown = ", ".join(repr(f) for f in unknown)
        raise ValueError(f"{who}{setting}: {shown} {plural} of {named}; its fields are {known}.")
    blank = [f for f, c in mapping.items() if not c and f not in optional]
    if blank:
        raise ValueError(
            f"{who}{setting}: {blank} must name a {what}: only optional fields of {named} "
            f"({list(optional) or 'none'}) can be left out."
        )
    pinned = [f for f in mapping if f in fixed]
    if pinned:
        raise ValueError(
            f"{who}{setting}: {pinned} cannot be mapped: it is filled by the integration itself; "
            f"map the other fields of {named}: {[f for f in known if f not in fixed]}."
        )
    columns: dict[str, str] = {}
    required: set[str] = set()
    for f in known:
        if f in fixed or (f in mapping and not mapping[f]):
            continue
        columns[f] = mapping.get(f, defaults.get(f, f))
        if f in fields or f in mapping:
            required.add(f)
    return FieldMap(columns, frozenset(required), setting, what, who)
