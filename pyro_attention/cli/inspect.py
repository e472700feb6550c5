"""``pyro-attention inspect``: a checkpoint's alignments as ArviZ data (InferenceData or DataTree), heatmaps and a
diagnostics table."""

from __future__ import annotations

import argparse
from pathlib import Path

from pyro_attention.cli.common import add_command, exit_with_error, int_at_least, os_error_text


def _inspect(args: argparse.Namespace) -> int:
    from pyro_attention.tasks.inspect import inspect_checkpoint

    try:
        result = inspect_checkpoint(
            args.checkpoint,
            args.out,
            args.plots,
            split=args.split,
            size=args.size,
            num_samples=args.num_samples,
            num_plots=args.num_plots,
            data_dir=args.data_dir,
        )
    except OSError as error:  # the NetCDF file or a figure
        exit_with_error(args.parser, ValueError(os_error_text(error, args.out)) if error.errno is not None else error)
        return 1
    except ValueError as error:
        exit_with_error(args.parser, error)
        return 1
    print(result["table"])
    print(f"wrote {Path(args.out).resolve()}")
    for figure in result["figures"]:
        print(f"wrote {Path(figure).resolve()}")
    return 0


def add_inspect(sub) -> None:  # noqa: ANN001 - argparse's subparsers action
    """``pyro-attention inspect``."""
    ins = add_command(sub, "inspect", _inspect, "a checkpoint's alignments: ArviZ NetCDF, heatmaps, diagnostics table")
    ins.add_argument("checkpoint", help="a checkpoint file or run folder written by `pyro-attention train`")
    ins.add_argument("--out", default="posterior.nc",
                     help="NetCDF file for the ArviZ data (read it with pyro_attention.inference.load_netcdf)")
    ins.add_argument("--plots", default=None, help="folder for the figures (none if not given)")
    ins.add_argument(
        "--split", default="val", choices=["train", "val", "test"], help="split of the checkpoint's corpus"
    )
    ins.add_argument("--size", type=int_at_least(1), default=20, help="sentence pairs to inspect")
    ins.add_argument("--num-samples", type=int_at_least(2), default=100, help="draws per group")
    ins.add_argument("--num-plots", type=int_at_least(0), default=4, help="sentence pairs drawn (with --plots)")
    ins.add_argument("--data-dir", default=None, help="where the corpus lives now (default: as in training)")
