"""``python -m pyro_attention`` = the ``pyro-attention`` command (what ``torchrun -m pyro_attention`` runs)."""

from pyro_attention.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
