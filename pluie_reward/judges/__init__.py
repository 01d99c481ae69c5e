"""Judges shipped with the package: the default judge is the embedded SmolLM2-135M-Instruct with a
PLUIE adapter tuned by the repository's ``scripts/build_judge.py`` (``smollm2-pluie/``)."""

from __future__ import annotations

from pathlib import Path

DEFAULT_ADAPTER_DIR = Path(__file__).resolve().parent / "smollm2-pluie"
DEFAULT_TEMPLATE = "para-fs"


def default_adapter_dir() -> Path | None:
    """The packaged PLUIE adapter of the default judge (None when the package has none).

    Example:
        >>> default_adapter_dir() == DEFAULT_ADAPTER_DIR
        True
    """
    return DEFAULT_ADAPTER_DIR if (DEFAULT_ADAPTER_DIR / "adapter_config.json").is_file() else None
