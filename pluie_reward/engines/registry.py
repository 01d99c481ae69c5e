"""The engines by name: what :meth:`Judge.load <pluie_reward.Judge.load>` (``engine=``),
:meth:`Judge.connect <pluie_reward.Judge.connect>`, :meth:`Judge.from_vllm <pluie_reward.Judge.from_vllm>`
and ``Judge(model, tokenizer)`` build.

Each engine is registered once (:func:`register_engine`): its factory, options dataclass and loader as
import paths ``"module:attribute"`` imported on first use, so importing this module loads no torch, vLLM or httpx.

Example:
    >>> sorted(ENGINES)
    ['remote', 'transformers', 'vllm', 'vllm-shared']
    >>> engine_spec("transformers").option_names()[:2]
    ('batch_tokens', 'disable_adapters')
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


def _resolve(path: str) -> Any:
    """The object an import path ``"package.module:attribute.attribute"`` names."""
    module, _, attributes = path.partition(":")
    value = importlib.import_module(module)
    for name in attributes.split("."):
        value = getattr(value, name)
    return value


@dataclass(frozen=True)
class LoadedEngine:
    """What a loader returns to ``Judge.load``: the engine, the judge's name (the model's display name,
    ``+<adapter>`` with an adapter) and whether the judge warms up by default (the embedded judges do)."""

    engine: Engine
    name: str
    warm_up: bool


@dataclass(frozen=True)
class EngineSpec:
    """One registered engine: import paths of its factory, options dataclass and loader (see :func:`register_engine`)."""

    name: str
    factory: str
    config_cls: str | None = None
    loader: str | None = None

    @property
    def make(self) -> Callable[..., Engine]:
        """The factory: ``spec.make(*args, **kwargs)`` is the engine."""
        return _resolve(self.factory)

    @property
    def load(self) -> Callable[..., LoadedEngine]:
        """The loader: ``spec.load(model, name=, adapter=, default_adapter=, device=, dtype=, device_map=,
        offload_device=, model_kwargs=, **options)`` loads a model by name (``Judge.load``'s arguments;
        ``default_adapter``, the default judge's adapter or ``None`` for the untuned model, is required)."""
        if self.loader is None:
            raise ValueError(f"the {self.name} engine does not load a model by name.")
        return _resolve(self.loader)

    def config(self) -> type | None:
        """The options dataclass (``None``: the factory takes its keyword arguments as they come)."""
        return None if self.config_cls is None else _resolve(self.config_cls)

    def option_names(self) -> tuple[str, ...] | None:
        """The names of the engine's options (the dataclass's fields), or ``None`` when it declares none."""
        config = self.config()
        return None if config is None else tuple(f.name for f in dataclasses.fields(config))


ENGINES: dict[str, EngineSpec] = {}


def register_engine(*, name: str, factory: str, config_cls: str | None = None, loader: str | None = None) -> EngineSpec:
    """Register an engine under ``name`` (each argument but ``name`` an import path ``"module:attribute"``).

    Args:
        name: the engine's name (``Judge.load(engine=name)`` when it has a loader).
        factory: the engine class, or a function making the engine.
        config_cls: its options dataclass, whose fields are the keyword arguments a judge hands on to it.
        loader: a function loading a model by name for ``Judge.load`` (see :attr:`EngineSpec.load`),
            returning a :class:`LoadedEngine`.

    Raises:
        ValueError: ``name`` is registered already.
    """
    if name in ENGINES:
        raise ValueError(f"an engine named {name!r} is registered already.")
    ENGINES[name] = EngineSpec(name, factory, config_cls, loader)
    return ENGINES[name]


def engine_spec(name: str) -> EngineSpec:
    """The engine registered as ``name`` (``ValueError`` if none is)."""
    if name not in ENGINES:
        raise ValueError(f"unknown engine {name!r}; the engines are {sorted(ENGINES)}.")
    return ENGINES[name]


def loader_spec(name: str) -> EngineSpec:
    """The engine registered as ``name`` if it loads a model by name (``ValueError`` otherwise)."""
    spec = ENGINES.get(name)
    if spec is None or spec.loader is None:
        names = " or ".join(repr(n) for n, s in ENGINES.items() if s.loader is not None)
        raise ValueError(f"unknown engine {name!r}; use {names} (or Judge.connect for a server).")
    return spec


register_engine(name="transformers", factory="pluie_reward.engines.transformers.engine:TransformersEngine",
                config_cls="pluie_reward.engines.transformers.config:TransformersEngineConfig",
                loader="pluie_reward.engines.transformers.engine:TransformersEngine.load")
register_engine(name="vllm", factory="pluie_reward.engines.vllm:VLLMEngine", loader="pluie_reward.engines.vllm:VLLMEngine.load")
register_engine(name="remote", factory="pluie_reward.engines.remote:RemoteEngine")
register_engine(name="vllm-shared", factory="pluie_reward.engines.vllm_shared:SharedVLLMEngine")
