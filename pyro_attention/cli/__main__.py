"""``python -m pyro_attention.cli`` = the ``pyro-attention`` command."""

from pyro_attention.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main())
