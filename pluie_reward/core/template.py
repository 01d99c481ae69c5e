"""PLUIE prompt templates: YAML data files describing a Yes/No chat question.

A template declares its fields, its two answer words, its language and the chat turns, with
``{field}`` placeholders. Built-in templates live in ``pluie_reward/templates/*.yaml``; users pass
a name, a YAML path or a :class:`Template`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_ROLES = {"system", "user", "assistant"}
DEFAULT_TEMPLATE = "para-fs"
# Judge.score's own keyword arguments: a field with one of these names could not be passed
# (tests check this list against the signature of Judge.score).
RESERVED_FIELDS = ("template", "details", "threshold", "truncate", "use_cache", "max_new_tokens")
_YAML_BOOL_HINT = ("YAML reads unquoted yes/no/on/off/true/false as booleans; quote the word, "
                   "e.g. \"yes\": \"Yes\" or content: \"No\"")


@dataclass(frozen=True)
class Message:
    """One chat turn; ``when`` names an optional field that must be given for the turn to appear."""

    role: str
    content: str
    when: str | None = None


@dataclass(frozen=True)
class Template:
    """A Yes/No question asked to a chat LLM about some text fields.

    Example:
        >>> t = load_template("para-fs")
        >>> t.fields
        ('source', 'hypothesis')
        >>> t.answers
        ('Yes', 'No')
    """

    name: str
    messages: tuple[Message, ...]
    fields: tuple[str, ...]
    answers: tuple[str, str]
    optional_fields: tuple[str, ...] = ()
    language: str = "en"
    description: str = ""
    reference: str = ""
    plain_user: str = "User: "
    plain_assistant: str = "Assistant: "
    plain_separator: str = "\n\n"
    field_help: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.messages or self.messages[-1].role != "user":
            raise ValueError(f"template {self.name!r}: the last message must be a user turn (the question).")
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
        if len(self.answers) != 2 or not all(isinstance(a, str) and a for a in self.answers):
            raise ValueError(f"template {self.name!r}: answers must be two non-empty strings (yes, no).")
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
    def all_fields(self) -> tuple[str, ...]:
        """Required then optional field names."""
        return self.fields + self.optional_fields

    def chat(self, values: Mapping[str, str | None]) -> list[dict[str, str]]:
        """Fill the placeholders and return the chat messages for one item.

        Example:
            >>> load_template("para-direct").chat({"source": "a", "hypothesis": "b"})[-1]["content"]
            'A: "a"; B: "b"'
        """
        out = []
        for message in self.messages:
            if message.when is not None and values.get(message.when) is None:
                continue
            content = _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), message.content)
            out.append({"role": message.role, "content": content})
        return out

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
            if isinstance(m["content"], bool) or isinstance(m["role"], bool):
                raise ValueError(f"template {label}: message {number} has the boolean {m['content']!r} as text: {_YAML_BOOL_HINT}.")
            turns.append(Message(str(m["role"]), str(m["content"]), m.get("when")))
        plain = data.get("plain") or {}
        help_text = {**(fields if isinstance(fields, Mapping) else {}), **(optional if isinstance(optional, Mapping) else {})}
        return cls(
            name=str(data.get("name", default_name)),
            messages=tuple(turns),
            fields=tuple(fields),
            optional_fields=tuple(optional),
            answers=(str(answers[0]), str(answers[1])),
            language=str(data.get("language", "en")),
            description=str(data.get("description", "")),
            reference=str(data.get("reference", "")),
            plain_user=plain.get("user", "User: "),
            plain_assistant=plain.get("assistant", "Assistant: "),
            plain_separator=plain.get("separator", "\n\n"),
            field_help=help_text,
        )


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
    return Template.from_dict(yaml.safe_load(resource.read_text(encoding="utf-8")), default_name=str(template))


def _template_file(path: Path) -> Template:
    """A template read from a YAML file; every problem is a ``ValueError`` naming the file."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
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


def normalize_fields(
    template: Template, values: Mapping[str, Any]
) -> tuple[dict[str, list[str | None]], int]:
    """Check the field values passed to a scorer and broadcast them to lists of equal length.

    A plain string is broadcast to the length of the list fields. Raises ``ValueError`` for missing
    or unknown fields and lists of different lengths, ``TypeError`` (naming field and index) for
    values that are not strings, ``ValueError`` (naming field and index) for text holding a lone
    surrogate; optional fields accept ``None`` per item (turn left out).

    Example:
        >>> normalize_fields(load_template("para-fs"), {"source": "s", "hypothesis": ["a", "b"]})
        ({'source': ['s', 's'], 'hypothesis': ['a', 'b']}, 2)
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
            raise TypeError(
                f"field {name!r} must be a string or a list of strings, not {type(value).__name__}."
            )
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
                raise TypeError(
                    f"field {name!r}, item {index}: expected a string, got {type(item).__name__} ({item!r})."
                )
            if not item.isascii():
                try:
                    item.encode("utf-8")
                except UnicodeEncodeError as err:  # a lone surrogate, e.g. from JSON "\ud800": not tokenizable text
                    raise ValueError(
                        f"field {name!r}, item {index}: character {err.start} is a lone surrogate "
                        f"({ascii(item[err.start])[1:-1]}), which is not valid Unicode text; fix the text "
                        "(e.g. decode the original bytes with errors='replace')."
                    ) from None
        out[name] = items
    return out, n
