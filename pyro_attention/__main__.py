"""``python -m pyro_attention`` = the ``pyro-attention`` command (what ``torchrun -m pyro_attention`` runs)."""

from pyro_attention.cli import main
from pyro_attention.inference.distributed import end_process

if __name__ == "__main__":
    status = main()
    end_process(status)  # a data-parallel run (torchrun) ends here; otherwise a no-op
    raise SystemExit(status)
