"""What the ``pluie-reward`` sub-commands share: the judge options and the judge they make, input columns, the
options a config dataclass declares."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any, Sequence

from ...common.errors import ModelNotFoundError
from ...core.judge import Judge
from ...core.prompt import chat_clock
from ...core.template import check_chat_template_kwargs
from ...engines.remote import RemoteEngineError
from ..shared import Progress, UsageError, finite_float, positive_float, positive_int, whole_int
from .records import parse_columns, read_table


def add_judge_arguments(parser: argparse.ArgumentParser, adapter: bool = True, base_model: bool = False) -> None:
    """The judge options (``adapter``: also ``--adapter DIR``; ``base_model``: ``--model`` is a base to tune)."""
    if base_model:
        parser.add_argument("--model", default="embedded-base", help="the base model the adapter is tuned on: HF id, local "
                            "folder or .gguf file (default: embedded-base, the untuned embedded SmolLM2-135M-Instruct, "
                            "which Judge.load(adapter=DIR) puts the adapter on)")
    else:
        parser.add_argument("--model", default=None, help="HF id, local folder or .gguf file (default: the default judge, the "
                            "embedded SmolLM2-135M-Instruct with its packaged PLUIE adapter; embedded-base: the untuned model)")
    if adapter:
        parser.add_argument("--adapter", default=None, metavar="DIR",
                            help="a judge adapter folder (pluie-reward tune --output DIR) put on --model, active while scoring")
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1, mps (default: best available)")
    parser.add_argument("--dtype", default=None, help="float32 (default), bfloat16, float16, auto")
    parser.add_argument("--batch-tokens", type=positive_int, default=None,
                        help="token budget of one batch (default: 512 on CPU, 4096 on GPU)")
    add_chat_template_kwargs_argument(parser)
    group = parser.add_argument_group("engine")
    group.add_argument("--engine", choices=("transformers", "vllm", "remote"), default="transformers",
                       help="transformers (this process, default), vllm (vLLM in this process) or remote (vLLM servers at --url)")
    group.add_argument("--url", default=None,
                       help="with --engine remote: the vLLM server(s), e.g. http://host:8000 (comma-separated for several)")
    group.add_argument("--tensor-parallel-size", type=positive_int, default=None, help="with --engine vllm: GPUs per replica (default 1)")
    group.add_argument("--gpu-memory-utilization", type=positive_float, default=None,
                       help="with --engine vllm: share of GPU memory vLLM may take")


def add_chat_template_kwargs_argument(parser: argparse.ArgumentParser) -> None:
    """``--chat-template-kwargs JSON``: keywords for the judge's chat template (read by :func:`chat_template_kwargs`)."""
    parser.add_argument("--chat-template-kwargs", default=None, metavar="JSON",
                        help="keywords for the judge's chat template, e.g. '{\"enable_thinking\": false}' (Qwen3) or "
                             "'{\"reasoning_effort\": \"low\"}' (gpt-oss); \"strftime_now\": \"YYYY-MM-DD\" sets the date a "
                             "template writes as today (default: a fixed date, so scores do not depend on the day)")


def chat_template_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The ``--chat-template-kwargs`` JSON object (``{}`` when not given); bad JSON is a :class:`UsageError`, a keyword
    or date the chat template cannot take a ``ValueError`` (``main`` makes both exit 2 with their message).

    Example:
        >>> chat_template_kwargs(argparse.Namespace(chat_template_kwargs='{"enable_thinking": false}'))
        {'enable_thinking': False}
    """
    text = getattr(args, "chat_template_kwargs", None)
    if text is None:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise UsageError(f"--chat-template-kwargs: not valid JSON ({err.msg} at character {err.pos}); give an object, "
                         "e.g. '{\"enable_thinking\": false}'.") from None
    if not isinstance(value, dict):
        raise UsageError(f"--chat-template-kwargs: give a JSON object of keyword to value, e.g. '{{\"enable_thinking\": false}}', "
                         f"not {text!r}.")
    check_chat_template_kwargs(value, "--chat-template-kwargs")
    if "strftime_now" in value:
        chat_clock(value["strftime_now"])
    return value


def check_device(device: str | None) -> None:
    """A usage error, before any model loads, for a device this torch build cannot use.

    Example:
        >>> check_device("cpu")
    """
    if device is None or device == "auto":
        return
    import torch

    try:
        wanted = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise UsageError(f"--device {device!r}: {err}; use cpu, cuda, cuda:N or mps.") from None
    if wanted.type == "cuda":
        if not torch.cuda.is_available():
            build = f"torch {torch.__version__}" + ("" if torch.version.cuda else ", a CPU-only build")
            raise UsageError(f"--device {device}: no CUDA GPU is usable here ({build}); use --device cpu, "
                             "or install a CUDA build of torch on a machine with a GPU.")
        if wanted.index is not None and wanted.index >= torch.cuda.device_count():
            raise UsageError(f"--device {device}: only {torch.cuda.device_count()} CUDA device(s) visible.")
    if wanted.type == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise UsageError(f"--device {device}: MPS is not available on this machine; use --device cpu.")


def check_engine_options(args: argparse.Namespace) -> None:
    """Refuse vLLM's options with another engine, where they would do nothing.

    Example:
        >>> args = argparse.Namespace(engine="transformers", tensor_parallel_size=2, gpu_memory_utilization=None)
        >>> check_engine_options(args)  # doctest: +NORMALIZE_WHITESPACE
        Traceback (most recent call last):
        ...
        pluie_reward.tools.shared.UsageError: --tensor-parallel-size is for --engine vllm (vLLM places the model on its GPUs itself); with
        --engine transformers it would do nothing: drop it, or add --engine vllm.
    """
    engine = getattr(args, "engine", "transformers")
    for option in ("--tensor-parallel-size", "--gpu-memory-utilization"):
        if engine != "vllm" and getattr(args, option[2:].replace("-", "_"), None) is not None:
            raise UsageError(f"{option} is for --engine vllm (vLLM places the model on its GPUs itself); with --engine "
                             f"{engine} it would do nothing: drop it, or add --engine vllm.")


def judge_from_args(args: argparse.Namespace) -> Any:
    """Load the judge the options describe; an unusable device or a model not found is a :class:`UsageError`."""
    engine = getattr(args, "engine", "transformers")
    check_engine_options(args)
    keywords = chat_template_kwargs(args)
    own = {"chat_template_kwargs": keywords} if keywords else {}
    if engine == "remote":
        if not args.url:
            raise UsageError("--engine remote needs --url http://host:port (a vLLM OpenAI-compatible server).")
        try:
            return Judge.connect(args.url, tokenizer=args.model, **own)
        except (RemoteEngineError, ValueError) as err:
            raise UsageError(f"--url {args.url}: {err}") from None
    if getattr(args, "url", None):
        raise UsageError("--url is for --engine remote.")
    if engine != "transformers" and getattr(args, "adapter", None):
        raise UsageError("--adapter needs --engine transformers (a PEFT adapter on the base model in this process).")
    check_device(args.device)
    what = "the default judge (SmolLM2-135M-Instruct + its PLUIE adapter)" if args.model is None else args.model
    print(f"pluie-reward {getattr(args, 'command', 'judge')}: loading {what}...", file=sys.stderr, flush=True)
    # no warm-up here: the command's first call pays those costs on its own template (`serve` warms up on it)
    own.setdefault("warm_up", False)
    from ...engines.transformers.loading import is_embedded, model_source  # lazy: CLI start-up

    with Progress(0, f"pluie-reward {getattr(args, 'command', 'judge')}: loading"):  # a line every 10 s until loaded
        try:
            if args.model is not None and not is_embedded(args.model):  # before torch loads: a wrong path or id fails in seconds
                model_source(args.model, default_adapter=None)
            if engine == "vllm":
                if args.device or args.batch_tokens:
                    raise UsageError("--engine vllm places the model itself: use --tensor-parallel-size and CUDA_VISIBLE_DEVICES, "
                                     "not --device or --batch-tokens.")
                options = {"tensor_parallel_size": args.tensor_parallel_size or 1}
                if args.gpu_memory_utilization is not None:
                    options["gpu_memory_utilization"] = args.gpu_memory_utilization
                try:
                    return Judge.load(args.model, engine="vllm", dtype=args.dtype, **options, **own)
                except ImportError as err:
                    raise UsageError(str(err)) from None
            return Judge.load(args.model, device=args.device, dtype=args.dtype, batch_tokens=args.batch_tokens,
                              adapter=getattr(args, "adapter", None), **own)
        except OSError as err:  # transformers: not a folder, not in the HF cache and no network, gated repo...
            if args.model is None or Path(args.model).exists():
                raise
            raise model_not_found(args.model, err) from None


def model_not_found(model: str, err: OSError) -> UsageError:
    """The usage error for a ``--model`` that is neither a local path nor provided by the Hub.

    Example:
        >>> print(model_not_found("./missing", OSError("Repo id must use alphanumeric chars")))
        --model ./missing: no such file or folder; give a local model folder, a .gguf file or a Hugging Face id.
        >>> print(model_not_found("judge.gguf", FileNotFoundError("GGUF file 'judge.gguf' does not exist.")))
        --model judge.gguf: no such file or folder; give a local model folder, a .gguf file or a Hugging Face id.
    """
    if model.startswith(("/", "./", "../", "~")) or "\\" in model or model.endswith(".gguf"):
        return UsageError(f"--model {model}: no such file or folder; give a local model folder, a .gguf file or a Hugging Face id.")
    if isinstance(err, ModelNotFoundError):  # the loader's own check: its message says what to do
        return UsageError(f"--model {err}")
    reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return UsageError(
        f"--model {model}: not a local folder or file, and the Hugging Face Hub did not provide it ({reason}). "
        f"Check the name; without network access, download it elsewhere (`hf download {model}`) and pass its "
        "folder to --model, or copy the Hugging Face cache here (HF_HOME) and set HF_HUB_OFFLINE=1."
    )


def read_records(path: Path, split: str | None = None) -> list[dict[str, Any]]:
    """Rows of an input file as dicts (see :func:`~pluie_reward.tools.cli.records.read_table`)."""
    return read_table(path, split).rows


def field_columns(args: argparse.Namespace, fields: Sequence[str], optional: Sequence[str] = ()) -> dict[str, str | None]:
    """Field -> input column from the ``--column`` options (:func:`~pluie_reward.tools.cli.records.parse_columns`)."""
    return parse_columns(args.column, [f for f in fields if f not in optional], optional)


def add_config_arguments(group: Any, config_cls: type, exclude: Sequence[str] = ()) -> None:
    """One option per field of a config dataclass (as TRL's parser does): ``--field-name`` and
    ``metadata["aliases"]``, help from ``metadata["help"]``, ``type=`` from ``metadata["type"]`` or the annotation
    (``bool``: ``--x/--no-x``), ``choices`` from ``metadata["choices"]``.

    Args:
        group: an ``argparse`` parser or argument group.
        config_cls: the dataclass (every field has a default).
        exclude: fields that get no option.

    Example:
        >>> from dataclasses import dataclass, field
        >>> @dataclass
        ... class Config:
        ...     epochs: float = field(default=2.0, metadata={"help": "passes", "aliases": ["-e"]})
        ...     shuffle: bool = field(default=True, metadata={"help": "shuffle the pairs"})
        ...     bf16: "bool | None" = field(default=None, metadata={"help": "bfloat16 (None: when supported)"})
        >>> parser = argparse.ArgumentParser()
        >>> add_config_arguments(parser, Config)
        >>> config_from_args(Config, parser.parse_args(["-e", "3", "--no-shuffle", "--bf16"]))
        Config(epochs=3.0, shuffle=False, bf16=True)
        >>> config_from_args(Config, parser.parse_args([]))
        Config(epochs=2.0, shuffle=True, bf16=None)
    """
    defaults = config_cls()
    for f in dataclasses.fields(config_cls):
        if f.name in exclude or not f.init:
            continue
        meta = f.metadata
        kwargs: dict[str, Any] = {"dest": f.name, "default": getattr(defaults, f.name),
                                  "help": meta.get("help", "").replace("%", "%%") + " (default %(default)s)"}
        annotation = (f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))).strip("'\"")
        if annotation.split(" | ")[0] == "bool":
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            kwargs["type"] = meta.get("type") or {"int": whole_int, "float": finite_float}.get(annotation, str)
            if "choices" in meta:
                kwargs["choices"] = meta["choices"]
        group.add_argument(f"--{f.name.replace('_', '-')}", *meta.get("aliases", ()), **kwargs)


def config_from_args(config_cls: type, args: argparse.Namespace) -> Any:
    """``config_cls`` built from the options :func:`add_config_arguments` made (the others keep their defaults); a
    value its ``__post_init__`` refuses (the message starts with the field's name) is a :class:`UsageError` naming
    the option."""
    given = {f.name: f for f in dataclasses.fields(config_cls) if hasattr(args, f.name)}
    try:
        return config_cls(**{name: getattr(args, name) for name in given})
    except ValueError as err:
        name = str(err).split(" ", 1)[0]
        if name not in given:
            raise UsageError(str(err)) from None
        flags = "/".join([f"--{name.replace('_', '-')}", *given[name].metadata.get("aliases", ())])
        raise UsageError(f"{flags}: {err}") from None
