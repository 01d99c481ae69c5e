"""``python -m pluie_reward ...`` is the ``pluie-reward`` command."""

import sys

from .tools.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
