"""The engines by name: what :meth:`Judge.load <pluie_reward.Judge.load>` (``engine=``),
:meth:`Judge.connect <pluie_reward.Judge.connect>`, :meth:`Judge.from_vllm <pluie_reward.Judge.from_vllm>`
and ``Judge(model, tokenizer)`` build.

Each engine is registered once (:func:`register_engine`, PEFT's ``register_peft_method`` in spirit)
with its factory, its options class and, for engines that load a model by name, its loader, each
given as an import path ``"module:attribute"`` and imported on first use: importing this module
loads no torch, vLLM or httpx.

Example:
    >>> sorted(ENGINES)
    ['remote', 'transformers', 'vllm', 'vllm-shared']
    >>> engine_spec("transformers").option_names()[:2]
    ('batch_tokens', 'disable_adapters')
    >>> engine_spec("vllm").option_names() is None  # any vllm.AsyncEngineArgs argument
    True
    >>> loader_spec("remote")
    Traceback (most recent call last):
    ...
    ValueError: unknown engine 'remote'; use 'transformers' or 'vllm' (or Judge.connect for a server).
"""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass
from typing import Any, Callable

from .base import Engine


def _resolve(target: "str | Any") -> Any:
    """The object an import path ``"package.module:attribute.attribute"`` names (other objects as given)."""
    if not isinstance(target, str):
        return target
    module, _, attributes = target.partition(":")
    value = importlib.import_module(module)
    for name in attributes.split("."):
        value = getattr(value, name)
    return value


@dataclass(frozen=True)
class LoadedEngine:
    """What an engine's loader returns to :meth:`Judge.load <pluie_reward.Judge.load>`.

    Attributes:
        engine: the engine.
        name: the judge's name (the model's display name, ``+<adapter>`` with an adapter).
        warm_up: whether the judge warms up by default (the embedded judges do).
    """

    engine: Engine
    name: str
    warm_up: bool


@dataclass(frozen=True)
class EngineSpec:
    """One registered engine (see :func:`register_engine`)."""

    name: str
    factory: "str | Callable[..., Engine]"
    config_cls: "str | type | None" = None
    loader: "str | Callable[..., LoadedEngine] | None" = None

    @property
    def make(self) -> Callable[..., Engine]:
        """The factory (imported on first use): ``spec.make(*args, **kwargs)`` is the engine."""
        return _resolve(self.factory)

    @property
    def load(self) -> Callable[..., LoadedEngine]:
        """The loader (imported on first use): ``spec.load(model, **options)`` loads a model by name."""
        if self.loader is None:
            raise ValueError(f"the {self.name} engine does not load a model by name.")
        return _resolve(self.loader)

    def config(self) -> type | None:
        """The engine's options dataclass (``None``: the factory takes its keyword arguments as they come)."""
        return None if self.config_cls is None else _resolve(self.config_cls)

    def option_names(self) -> tuple[str, ...] | None:
        """The names of the engine's options (its options dataclass's fields), or ``None`` (not declared)."""
        config = self.config()
        return None if config is None else tuple(f.name for f in dataclasses.fields(config))


ENGINES: dict[str, EngineSpec] = {}


def register_engine(
    *,
    name: str,
    factory: "str | Callable[..., Engine]",
    config_cls: "str | type | None" = None,
    loader: "str | Callable[..., LoadedEngine] | None" = None,
) -> EngineSpec:
    """Register an engine under ``name``.

    Args:
        name: the engine's name (``Judge.load(engine=name)`` when it has a loader).
        factory: the engine class (or a function making the engine), or its import path ``"module:attribute"``.
        config_cls: its options dataclass (or its import path), whose fields are the keyword
            arguments the judge hands on to it; ``None`` when it declares none.
        loader: a function (or its import path) ``loader(model, *, name, adapter, default_adapter, device,
            dtype, device_map, offload_device, model_kwargs, **options) -> LoadedEngine`` loading a
            model by name for ``Judge.load``; ``None`` when the engine is made from an object.

    Returns:
        The registered :class:`EngineSpec`.

    Raises:
        ValueError: ``name`` is registered already.
    """
    if name in ENGINES:
        raise ValueError(f"an engine named {name!r} is registered already.")
    spec = EngineSpec(name, factory, config_cls, loader)
    ENGINES[name] = spec
    return spec


def engine_spec(name: str) -> EngineSpec:
    """The engine registered as ``name``.

    Raises:
        ValueError: no engine has that name.
    """
    if name not in ENGINES:
        raise ValueError(f"unknown engine {name!r}; the engines are {sorted(ENGINES)}.")
    return ENGINES[name]


def loader_spec(name: str) -> EngineSpec:
    """The engine registered as ``name``, if it loads a model by name (``Judge.load(engine=name)``).

    Raises:
        ValueError: no such engine, or it does not load a model by name.
    """
    spec = ENGINES.get(name)
    if spec is None or spec.loader is None:
        names = " or ".join(repr(n) for n, s in ENGINES.items() if s.loader is not None)
        raise ValueError(f"unknown engine {name!r}; use {names} (or Judge.connect for a server).")
    return spec


register_engine(
    name="transformers",
    factory="pluie_reward.engines.transformers.engine:TransformersEngine",
    config_cls="pluie_reward.engines.transformers.config:TransformersEngineConfig",
    loader="pluie_reward.engines.transformers.engine:TransformersEngine.load",
)
register_engine(name="vllm", factory="pluie_reward.engines.vllm:VLLMEngine", loader="pluie_reward.engines.vllm:VLLMEngine.load")
register_engine(name="remote", factory="pluie_reward.engines.remote:RemoteEngine")
register_engine(name="vllm-shared", factory="pluie_reward.engines.vllm_shared:SharedVLLMEngine")
