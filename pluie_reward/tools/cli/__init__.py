"""The ``pluie-reward`` command line (:func:`main`) and what its sub-commands share (:mod:`.common`)."""

from .main import main

__all__ = ["main"]
