"""The package's one exception base (``PluieError``) and its one HTTP client (``core/http.py``):
retries, ``Retry-After``, timeouts and errors, the same for the sync and async clients, against a
real server on 127.0.0.1."""

from __future__ import annotations

import ast
import builtins
import pickle
from pathlib import Path

import pytest

from pluie_reward.core.errors import PluieError, RemoteError

ROOT = Path(__file__).resolve().parents[1] / "pluie_reward"

# Exceptions that never reach a user: caught where they are raised (control flow).
PRIVATE = {
    "_Restart": "engines/transformers/engine.py",  # the fast path gave up: rerun on the plain path
    "Interrupted": "tools/evaluation/cli.py",  # Ctrl-C during an evaluation, turned into exit code 130
    "BodyTooLarge": "tools/server/app.py",  # a request body over the limit, answered 413
}


def _base_name(node: ast.expr) -> str:
    return node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")


def package_classes() -> dict[str, tuple[str, list[str]]]:
    """Every class defined in pluie_reward (read with ``ast``: nothing imported): name -> (file, base names)."""
    found: dict[str, tuple[str, list[str]]] = {}
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                found[node.name] = (path.relative_to(ROOT).as_posix(), [_base_name(b) for b in node.bases])
    return found


def _builtin_exception(name: str) -> type | None:
    value = getattr(builtins, name, None)
    return value if isinstance(value, type) and issubclass(value, BaseException) else None


def test_every_package_exception_subclasses_pluie_error():
    classes = package_classes()

    def is_exception(name: str, seen: frozenset = frozenset()) -> bool:
        if _builtin_exception(name) is not None:
            return True
        if name not in classes or name in seen:
            return False
        return any(is_exception(b, seen | {name}) for b in classes[name][1])

    def is_pluie(name: str, seen: frozenset = frozenset()) -> bool:
        if name == "PluieError":
            return True
        if name not in classes or name in seen:
            return False
        return any(is_pluie(b, seen | {name}) for b in classes[name][1])

    def is_warning(name: str) -> bool:
        return any(issubclass(_builtin_exception(b) or Exception, Warning) for b in classes[name][1])

    exceptions = sorted(n for n in classes if any(is_exception(b) for b in classes[n][1]))
    for name in ("MissingColumnError", "RemoteEngineError", "RemoteJudgeError", "SharedModelBusy", "EngineAsleep", "ScoringError"):
        assert name in exceptions  # the walk sees the package's exceptions
    outside = [
        f"{classes[n][0]}: {n}({', '.join(classes[n][1])})"
        for n in exceptions
        if not is_pluie(n) and not is_warning(n) and PRIVATE.get(n) != classes[n][0]
    ]
    assert not outside, "exceptions that do not subclass PluieError:\n" + "\n".join(outside)
    for name, where in PRIVATE.items():  # the exemptions still exist where they are said to be
        assert classes.get(name, ("",))[0] == where


def test_errors_keep_their_builtin_bases():
    from pluie_reward import PluieError as exported
    from pluie_reward.core.fields import MissingColumnError
    from pluie_reward.core.prompt import AnswerTokenError
    from pluie_reward.engines.remote import RemoteEngineError
    from pluie_reward.integrations.batching import ScoringError, ShuttingDown
    from pluie_reward.integrations.client import RemoteJudgeError

    assert exported is PluieError
    missing = MissingColumnError("no column 'x'")
    assert isinstance(missing, (KeyError, ValueError, PluieError)) and isinstance(missing, KeyError) and str(missing) == "no column 'x'"
    assert issubclass(AnswerTokenError, ValueError) and issubclass(ShuttingDown, RuntimeError)
    assert issubclass(ScoringError, PluieError)
    for remote in (RemoteEngineError, RemoteJudgeError):
        assert issubclass(remote, RemoteError) and issubclass(remote, RuntimeError) and issubclass(remote, PluieError)
    assert not issubclass(RemoteEngineError, RemoteJudgeError) and not issubclass(RemoteJudgeError, RemoteEngineError)
    err = RemoteJudgeError("http://h/score: HTTP 422: bad", 422, url="http://h/score", detail="bad")
    back = pickle.loads(pickle.dumps(err))  # errors cross process boundaries (Ray, verl workers)
    assert (type(back), str(back), back.status, back.url, back.detail) == (RemoteJudgeError, str(err), 422, "http://h/score", "bad")
