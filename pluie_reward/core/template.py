"""PLUIE prompt templates: YAML data files describing a Yes/No chat question.

A template declares its fields, its two answer words, its language and the chat turns, with
``{field}`` placeholders. Built-in templates live in ``pluie_reward/templates/*.yaml``; users pass
a name, a YAML path or a :class:`Template`.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from ..common.errors import invalid_text

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_ROLES = {"system", "user", "assistant"}
DEFAULT_TEMPLATE = "para-fs"
GENERATED = "generated"  # the value key of a judge-generated turn (INDIRECT); not a field name
# Judge.score's own keyword arguments: a field with one of these names could not be passed
# (tests check this list against the signature of Judge.score).
RESERVED_FIELDS = ("template", "details", "threshold", "truncate", "use_cache", "max_new_tokens")
# apply_chat_template's own arguments: a chat-template keyword with one of these names would clash
_CHAT_ARGUMENTS = ("conversation", "messages", "tools", "documents", "chat_template", "add_generation_prompt",
                   "continue_final_message", "tokenize", "return_dict", "tokenizer_kwargs")
_BREAK_RUN = re.compile(r"\s*\n\s*")  # a run of whitespace holding a line break (\r\n, blank lines...)
_SPACE_RUN = re.compile(r"[^\S\n]+")  # a run of whitespace without one (spaces, tabs, no-break spaces...)
_YAML_BOOL_HINT = ("YAML reads unquoted yes/no/on/off/true/false as booleans; quote the word, "
                   "e.g. \"yes\": \"Yes\" or content: \"No\"")


@dataclass(frozen=True)
class Message:
    """One chat turn.

    ``when`` names an optional field that must be given for the turn to appear; ``generate`` marks
    an assistant turn whose content the judge generates itself (greedy) before the answer is read.
    """

    role: str
    content: str
    when: str | None = None
    generate: bool = False


@dataclass(frozen=True)
class Template:
    """A question asked to a chat LLM about some text fields, answered with one of a few words.

    Two answers (``yes``, ``no``) give PLUIE, ``log p(yes) - log p(no)``. More answers give a
    choice (``labels`` name them; the score is ``log p(first) - log p(second)``) or, with
    ``values``, a rating scale whose score is the expected value under the answers' probabilities
    renormalised over them. A message with ``generate: true`` is written by the judge itself
    (greedy, at most ``max_new_tokens``) before the answer is read (ParaPLUIE's INDIRECT).
    ``chat_template_kwargs`` (YAML key ``chat_template_kwargs:``) are keywords for the judge's chat
    template, e.g. ``{"reasoning_effort": "low"}`` (see :meth:`with_chat_template_kwargs`).

    Example:
        >>> t = load_template("para-fs")
        >>> t.fields
        ('source', 'hypothesis')
        >>> t.answers, t.kind, t.labels
        (('Yes', 'No'), 'binary', ('yes', 'no'))
    """

    name: str
    messages: tuple[Message, ...]
    fields: tuple[str, ...]
    answers: tuple[str, ...]
    optional_fields: tuple[str, ...] = ()
    language: str = "en"
    description: str = ""
    reference: str = ""
    plain_user: str = "User: "
    plain_assistant: str = "Assistant: "
    plain_separator: str = "\n\n"
    field_help: Mapping[str, str] = field(default_factory=dict)
    system: str | None = None
    answer_labels: tuple[str, ...] = ()
    values: tuple[float, ...] = ()
    max_new_tokens: int = 256
    # not in repr: saved runs fingerprint repr(template); they record the keywords on their own
    chat_template_kwargs: Mapping[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        check_chat_template_kwargs(self.chat_template_kwargs, f"template {self.name!r}")
        if not self.messages or self.messages[-1].role != "user":
            raise ValueError(f"template {self.name!r}: the last message must be a user turn (the question).")
        declared = list(self.fields) + list(self.optional_fields)
        twice = sorted({f for f in declared if declared.count(f) > 1})
        if twice:
            raise ValueError(f"template {self.name!r}: field(s) {twice} declared twice (fields and optional_fields "
                             "together name each field once); remove the repeat.")
        known = set(self.fields) | set(self.optional_fields)
        for message in self.messages:
            if message.role not in _ROLES:
                raise ValueError(f"template {self.name!r}: unknown role {message.role!r}; use one of {sorted(_ROLES)}.")
            if message.when is not None and message.when not in self.optional_fields:
                raise ValueError(
                    f"template {self.name!r}: 'when: {message.when}' must name an optional field "
                    f"(declared: {list(self.optional_fields)})."
                )
            for name in _PLACEHOLDER.findall(message.content):
                if name not in known:
                    raise ValueError(
                        f"template {self.name!r}: placeholder {{{name}}} is not a declared field "
                        f"(fields: {sorted(known)})."
                    )
        if len(self.answers) < 2 or not all(isinstance(a, str) and a for a in self.answers):
            raise ValueError(f"template {self.name!r}: answers must be at least two non-empty strings.")
        if len(set(self.answers)) != len(self.answers):
            raise ValueError(f"template {self.name!r}: the answers {list(self.answers)} repeat a word.")
        if self.answer_labels and len(self.answer_labels) != len(self.answers):
            raise ValueError(f"template {self.name!r}: labels must name each of the {len(self.answers)} answers.")
        if self.values and (len(self.values) != len(self.answers) or not all(isinstance(v, (int, float)) for v in self.values)):
            raise ValueError(f"template {self.name!r}: values must give one number per answer ({len(self.answers)}).")
        generated = [i for i, m in enumerate(self.messages) if m.generate]
        if len(generated) > 1:
            raise ValueError(f"template {self.name!r}: at most one message may be generated by the judge.")
        for i in generated:
            if self.messages[i].role != "assistant" or i == 0 or self.messages[i].when is not None:
                raise ValueError(
                    f"template {self.name!r}: the generated message must be an assistant turn after a user turn "
                    "(without 'when')."
                )
        if GENERATED in known:
            raise ValueError(f"template {self.name!r}: {GENERATED!r} is reserved for the judge's generated turn.")
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise ValueError(f"template {self.name!r}: max_new_tokens must be a positive integer.")
        reserved = [f for f in self.fields + self.optional_fields if f in RESERVED_FIELDS]
        if reserved:
            raise ValueError(
                f"template {self.name!r}: field {reserved[0]!r} has the name of a Judge.score keyword "
                f"({', '.join(RESERVED_FIELDS)}), so it could never be passed as a field; rename it "
                f"(e.g. '{reserved[0]}_text') in 'fields' and in its placeholders."
            )
        used = {n for m in self.messages for n in _PLACEHOLDER.findall(m.content)}
        if not used:
            raise ValueError(
                f"template {self.name!r}: no message has a {{field}} placeholder, so every item would get the same "
                "prompt and the same score; put the fields in the question, e.g. 'A: \"{source}\"; B: \"{hypothesis}\"'."
            )
        unused = [f for f in self.fields + self.optional_fields if f not in used and not any(m.when == f for m in self.messages)]
        if unused:
            raise ValueError(
                f"template {self.name!r}: field(s) {unused} appear in no message, so the judge would never see them; "
                "add a {" + unused[0] + "} placeholder or remove the field."
            )

    @property
    def kind(self) -> str:
        """``"binary"`` (PLUIE), ``"choice"`` (N answers) or ``"scale"`` (N answers with values)."""
        if self.values:
            return "scale"
        return "binary" if len(self.answers) == 2 else "choice"

    @property
    def labels(self) -> tuple[str, ...]:
        """The answers' names in records: ``("yes", "no")`` for PLUIE, else ``labels`` or the words."""
        if self.answer_labels:
            return self.answer_labels
        return ("yes", "no") if self.kind == "binary" else self.answers

    @property
    def generates(self) -> bool:
        """Whether the judge writes a turn of the conversation before answering (INDIRECT)."""
        return any(m.generate for m in self.messages)

    @property
    def all_fields(self) -> tuple[str, ...]:
        """Required then optional field names."""
        return self.fields + self.optional_fields

    def chat(self, values: Mapping[str, str | None], until_generated: bool = False) -> list[dict[str, str]]:
        """Fill the placeholders and return the chat messages for one item.

        The judge-generated turn takes ``values["generated"]``; ``until_generated=True`` returns the
        messages before it (the conversation the judge continues).

        Example:
            >>> load_template("para-direct").chat({"source": "a", "hypothesis": "b"})[-1]["content"]
            'A: "a"; B: "b"'
        """
        out = [] if self.system is None else [{"role": "system", "content": self.system}]
        for message in self.messages:
            if message.generate:
                if until_generated:
                    return out
                out.append({"role": message.role, "content": str(values[GENERATED])})
                continue
            if message.when is not None and values.get(message.when) is None:
                continue
            content = _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), message.content)
            out.append({"role": message.role, "content": content})
        return out

    def with_system(self, system: str | None) -> "Template":
        """This template with a system turn of its own (``None``: the chat template's default, if any).

        It replaces the default system turn some chat templates add (Qwen2.5, SmolLM2...); ``""`` gives an
        empty system turn.

        Example:
            >>> load_template("para-direct").with_system("You are a careful judge.").chat({"source": "a", "hypothesis": "b"})[0]
            {'role': 'system', 'content': 'You are a careful judge.'}
        """
        if any(m.role == "system" for m in self.messages) and system is not None:
            raise ValueError(f"template {self.name!r} already has a system message; edit it in the template instead.")
        return dataclasses.replace(self, system=system)

    def with_chat_template_kwargs(self, kwargs: Mapping[str, Any] | None = None, **more: Any) -> "Template":
        """This template with keywords for the judge's chat template (merged over its own).

        They reach ``tokenizer.apply_chat_template`` in every rendering (Qwen3's ``enable_thinking``,
        ``strftime_now``: an ISO date) and override the judge's own defaults.

        Args:
            kwargs: keyword -> value (JSON values).
            more: more keywords.

        Returns:
            A new template.

        Example:
            >>> load_template("para-fs").with_chat_template_kwargs({"reasoning_effort": "low"}).chat_template_kwargs
            {'reasoning_effort': 'low'}
        """
        return dataclasses.replace(self, chat_template_kwargs={**self.chat_template_kwargs, **(kwargs or {}), **more})

    def plain(self, values: Mapping[str, str | None]) -> tuple[str, str]:
        """Plain-text rendering for models without a chat template.

        Returns ``(prompt, answer_prefix)``: the prompt ends with the assistant label, without its
        trailing space, and the answer is read as ``answer_prefix + answer`` (e.g. ``" Yes"``).
        """
        labels = {"user": self.plain_user, "assistant": self.plain_assistant, "system": ""}
        turns = [labels[m["role"]] + m["content"] for m in self.chat(values)]
        tail = self.plain_assistant.rstrip()
        prompt = self.plain_separator.join(turns + [tail])
        return prompt, self.plain_assistant[len(tail) :] or " "

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], default_name: str = "custom") -> "Template":
        """Build a template from its YAML mapping (see the built-in files for the schema)."""
        if not isinstance(data, Mapping):
            raise ValueError(f"a template must be a mapping with the keys name, fields, answers and messages, "
                             f"not a {type(data).__name__}.")
        label = repr(str(data.get("name", default_name)))
        try:
            answers = data["answers"]
            messages = data["messages"]
            fields = data["fields"]
        except KeyError as err:
            raise ValueError(f"template {label} lacks the key {err.args[0]!r}.") from None
        if isinstance(answers, Mapping):  # YAML 1.1 reads unquoted yes/no keys as booleans
            yes, no = answers.get("yes", answers.get(True)), answers.get("no", answers.get(False))
            if yes is None or no is None:
                raise ValueError(f"template {label}: answers needs the keys yes and no.")
            answers = (yes, no)
        if isinstance(answers, (str, bytes)) or not isinstance(answers, Sequence) or len(answers) < 2:
            raise ValueError(f"template {label}: answers must be {{yes: ..., no: ...}} or a list of answer words.")
        for which, word in zip(("yes", "no", *(f"answer {k}" for k in range(3, len(answers) + 1))), answers):
            if isinstance(word, bool):
                raise ValueError(f"template {label}: the {which} answer is the boolean {word}, not a word: {_YAML_BOOL_HINT}.")
        optional = data.get("optional_fields") or {}
        for kind, names in (("fields", fields), ("optional_fields", optional)):
            if isinstance(names, (str, bytes)) or not isinstance(names, (Sequence, Mapping)):
                raise ValueError(f"template {label}: {kind} must be a list (or mapping) of field names.")
            bad = [n for n in names if not isinstance(n, str)]
            if bad:
                raise ValueError(f"template {label}: {kind} has the non-text name {bad[0]!r}: {_YAML_BOOL_HINT}.")
        if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
            raise ValueError(f"template {label}: messages must be a list of {{role: ..., content: ...}}.")
        turns = []
        for number, m in enumerate(messages, 1):
            if not isinstance(m, Mapping):
                raise ValueError(f"template {label}: message {number} must be a mapping {{role: ..., content: ...}}.")
            for key in ("role", "content") if not m.get("generate") else ("role",):  # a generated turn has no text
                if key not in m or m[key] is None:
                    raise ValueError(
                        f"template {label}: message {number} has no {key!r}"
                        + (" (system, user or assistant)." if key == "role" else " (the text of the turn).")
                    )
            if isinstance(m.get("content"), bool) or isinstance(m["role"], bool):
                raise ValueError(f"template {label}: message {number} has the boolean {m['content']!r} as text: {_YAML_BOOL_HINT}.")
            turns.append(Message(str(m["role"]), str(m.get("content") or ""), m.get("when"), bool(m.get("generate", False))))
        plain = data.get("plain") or {}
        help_text = {**(fields if isinstance(fields, Mapping) else {}), **(optional if isinstance(optional, Mapping) else {})}
        return cls(
            name=str(data.get("name", default_name)),
            messages=tuple(turns),
            fields=tuple(fields),
            optional_fields=tuple(optional),
            answers=tuple(str(a) for a in answers),
            answer_labels=tuple(str(x) for x in data.get("labels") or ()),
            values=tuple(data.get("values") or ()),
            max_new_tokens=int((data.get("generation") or {}).get("max_new_tokens", 256)),
            language=str(data.get("language", "en")),
            description=str(data.get("description", "")),
            reference=str(data.get("reference", "")),
            plain_user=plain.get("user", "User: "),
            plain_assistant=plain.get("assistant", "Assistant: "),
            plain_separator=plain.get("separator", "\n\n"),
            field_help=help_text,
            system=None if data.get("system") is None else str(data["system"]),
            chat_template_kwargs=dict(check_chat_template_kwargs(data.get("chat_template_kwargs") or {}, f"template {label}")),
        )


def check_chat_template_kwargs(kwargs: Any, where: str = "chat_template_kwargs") -> Mapping[str, Any]:
    """Check keywords meant for ``tokenizer.apply_chat_template`` (a mapping of names to values).

    Args:
        kwargs: the keywords.
        where: what holds them, for messages.

    Returns:
        ``kwargs`` unchanged.

    Raises:
        ValueError: not a mapping, a name that is not text, or one of apply_chat_template's own arguments.

    Example:
        >>> check_chat_template_kwargs({"enable_thinking": False})
        {'enable_thinking': False}
    """
    if not isinstance(kwargs, Mapping):
        raise ValueError(f"{where}: chat_template_kwargs must be a mapping of keyword to value "
                         f"(e.g. {{\"enable_thinking\": false}}), not a {type(kwargs).__name__}.")
    for name in kwargs:
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"{where}: chat_template_kwargs has the key {name!r}, not a keyword name.")
        if name in _CHAT_ARGUMENTS:
            raise ValueError(f"{where}: chat_template_kwargs cannot set {name!r}, an argument pluie-reward passes "
                             "to apply_chat_template itself.")
    return kwargs


def _builtin_dir() -> Any:
    return resources.files("pluie_reward") / "templates"


def builtin_template_names() -> list[str]:
    """Names of the templates shipped with the package.

    Example:
        >>> "para-fs" in builtin_template_names()
        True
    """
    return sorted(p.name[: -len(".yaml")] for p in _builtin_dir().iterdir() if p.name.endswith(".yaml"))


def load_template(template: "str | Path | Template | None" = None) -> Template:
    """Resolve a template given as a built-in name, a YAML path or a :class:`Template`.

    Example:
        >>> load_template("rev").optional_fields
        ('gold',)
    """
    if template is None:
        template = DEFAULT_TEMPLATE
    if isinstance(template, Template):
        return template
    if not isinstance(template, (str, Path)):
        raise TypeError(f"template must be a name, a YAML path or a Template, not {type(template).__name__}.")
    path = Path(template)
    if path.suffix in {".yaml", ".yml"} or path.is_file():
        if not path.is_file():
            raise FileNotFoundError(f"template file {str(path)!r} does not exist.")
        return _template_file(path)
    resource = _builtin_dir() / f"{template}.yaml"
    if not resource.is_file():
        raise ValueError(
            f"unknown template {str(template)!r}; built-in templates: {builtin_template_names()} "
            "(or pass a path to a YAML file)."
        )
    return Template.from_dict(_load_yaml(resource.read_text(encoding="utf-8")), default_name=str(template))


class _StrictLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a mapping that repeats a key (PyYAML keeps the last one silently)."""

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"the key {key!r} appears twice", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


def _load_yaml(text: str) -> Any:
    """A template's YAML text as Python data (safe loading; a repeated key is a ``yaml.YAMLError``)."""
    return yaml.load(text, Loader=_StrictLoader)  # noqa: S506  (a SafeLoader subclass)


def _template_file(path: Path) -> Template:
    """A template read from a YAML file; every problem is a ``ValueError`` naming the file."""
    try:
        data = _load_yaml(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err)
        raise ValueError(
            f"template file {path}: not valid YAML ({problem}{where}); quote text containing ': ' or '#', "
            "e.g. content: 'A: \"{source}\"'."
        ) from None
    except UnicodeDecodeError as err:
        raise ValueError(f"template file {path}: not UTF-8 text (byte {err.start}); save it as UTF-8.") from None
    try:
        return Template.from_dict(data, default_name=path.stem)
    except ValueError as err:
        raise ValueError(f"template file {path}: {err}") from None


def clean_text(text: str) -> str:
    """What the judge reads of a field value (a source, a completion...): the text without its
    surrounding whitespace, each inner run of whitespace holding a line break made one ``"\\n"``, and
    each other inner run (spaces, tabs, no-break spaces) one space. Layout a policy can add at no
    cost (a trailing newline, padding, doubled spaces, blank lines) then cannot move a score; words,
    punctuation, case and quotes are kept as given (the hack probe's ``presentation`` family reports
    what those edits do to a reward). Every scoring path applies it, through :meth:`Judge.plan
    <pluie_reward.Judge.plan>`; ``Judge(..., clean_text=False)`` reads values exactly as given.

    Args:
        text: a field value.

    Returns:
        The cleaned text.

    Example:
        >>> clean_text("  A cat\\tsleeps  on the mat.\\r\\n\\n It purrs.\\n")
        'A cat sleeps on the mat.\\nIt purrs.'
        >>> clean_text(" \\n ")
        ''
    """
    return _SPACE_RUN.sub(" ", _BREAK_RUN.sub("\n", text)).strip()


def normalize_fields(
    template: Template, values: Mapping[str, Any], *, clean: bool = False
) -> tuple[dict[str, list[str | None]], int]:
    """Check the field values passed to a scorer and broadcast them to lists of equal length.

    A plain string is broadcast to the length of the list fields. Raises ``ValueError`` for missing
    or unknown fields and lists of different lengths, ``TypeError`` (naming field and index) for
    values that are not strings, ``ValueError`` (naming field and index) for text holding a lone
    surrogate; optional fields accept ``None`` per item (turn left out).

    Args:
        template: the template whose fields these are.
        values: field -> a list (one value per item) or one string shared by all items.
        clean: pass every value through :func:`clean_text` (what a judge reads; the checks only
            leave it off).

    Returns:
        ``(columns, n)``: field -> ``n`` values.

    Example:
        >>> normalize_fields(load_template("para-fs"), {"source": "s", "hypothesis": ["a", "b"]})
        ({'source': ['s', 's'], 'hypothesis': ['a', 'b']}, 2)
        >>> normalize_fields(load_template("para-fs"), {"source": "s ", "hypothesis": ["a\\n"]}, clean=True)[0]
        {'source': ['s'], 'hypothesis': ['a']}
    """
    unknown = sorted(set(values) - set(template.all_fields))
    missing = [f for f in template.fields if f not in values]
    if unknown or missing:
        problems = []
        if missing:
            problems.append(f"missing field(s) {missing}")
        if unknown:
            problems.append(f"unknown field(s) {unknown}")
        raise ValueError(
            f"template {template.name!r}: {' and '.join(problems)}. It takes the fields {list(template.fields)}"
            + (f" and optionally {list(template.optional_fields)}" if template.optional_fields else "")
            + "."
        )
    lengths = {}
    for name, value in values.items():
        if value is None and name in template.optional_fields:
            continue
        if isinstance(value, str):
            continue
        if not isinstance(value, Sequence):
            raise TypeError(f"field {name!r} must be a string or a list of strings, not {type(value).__name__}.")
        lengths[name] = len(value)
    if len(set(lengths.values())) > 1:
        raise ValueError(f"fields have different lengths: {lengths}; pass one value per item in every field.")
    n = next(iter(lengths.values())) if lengths else 1
    out: dict[str, list[str | None]] = {}
    for name, value in values.items():
        if value is None:
            out[name] = [None] * n
            continue
        items = [value] * n if isinstance(value, str) else list(value)
        for index, item in enumerate(items):
            if item is None and name in template.optional_fields:
                continue
            if not isinstance(item, str):
                raise TypeError(f"field {name!r}, item {index}: expected a string, got {type(item).__name__} ({item!r}).")
            if invalid_text(item):
                raise ValueError(f"field {name!r}, item {index}: {invalid_text(item)}.")
        out[name] = [v if v is None else clean_text(v) for v in items] if clean else items
    return out, n
