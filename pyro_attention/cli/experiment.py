"""``pyro-attention experiment run | status | curves | merge | plot``: tables of translation rows from an experiment
file, trained and evaluated row by row, resumable; where they stand; their curves; tables built from several runs
folders and their figures."""

from __future__ import annotations

import argparse
import sys

from pyro_attention.cli.common import add_command, exit_with_error, int_at_least


def _run(args: argparse.Namespace) -> int:
    from pyro_attention.tasks.translation import TrainingInterrupted
    from pyro_attention.tasks.translation.runner import markdown_table, run_experiment

    overrides = {k: v for k, v in (("device", args.device), ("threads", args.threads),
                                   ("matmul_precision", args.matmul_precision),
                                   ("autocast", args.autocast)) if v is not None}
    try:
        table = _guarded(args, lambda: run_experiment(
            args.config, args.out, only=args.rows, max_epochs=args.max_epochs, progress=not args.quiet,
            bleu=not args.no_bleu, overrides=overrides, evaluate_paused=args.evaluate_paused))
    except TrainingInterrupted as stop:
        print(f"pyro-attention experiment run: {stop.signal_name}: {stop.checkpoint} written; run the same command "
              "again to continue", file=sys.stderr)
        return 130
    print(markdown_table(table))
    return 0


def _status(args: argparse.Namespace) -> int:
    from pyro_attention.tasks.translation.status import experiment_status, status_table

    return _show(args, lambda: experiment_status(args.config, args.out, only=args.rows), status_table)


def _curves(args: argparse.Namespace) -> int:
    from pyro_attention.tasks.translation.status import experiment_curves

    return _show(args, lambda: experiment_curves(args.config, args.out, only=args.rows), str)


def _merge(args: argparse.Namespace) -> int:
    from pyro_attention.tasks.translation.runner import merge_rows

    return _show(args, lambda: merge_rows(args.table, args.out, only=args.rows, note=args.note),
                 lambda merged: "\n".join(f"{args.table}: {how} row {label} from {args.out}" for label, how in merged))


def _plot(args: argparse.Namespace) -> int:
    from pyro_attention.tasks.translation.curves import plot_table

    return _show(args, lambda: plot_table(args.table, args.figure),
                 lambda figure: figure or f"{args.table}: no row has a val_ppl_per_epoch curve; nothing drawn")


def _show(args: argparse.Namespace, work, render) -> int:  # noqa: ANN001 - thunks
    """Print ``render(work())`` (exit status 0; :func:`_guarded` says why not and exits otherwise)."""
    print(render(_guarded(args, work)))
    return 0


def _guarded(args: argparse.Namespace, work):  # noqa: ANN001, ANN202 - a thunk and what it returns
    """``work()``; an experiment file or ``--rows`` that cannot be run is an error of the call (exit status 2, as
    ``train --config``'s), any other ``OSError`` / ``ValueError`` one line on stderr and exit status 1."""
    from pyro_attention.tasks.translation.runner import ExperimentFileError

    try:
        return work()
    except ExperimentFileError as error:  # the file or --rows, found before anything runs
        args.parser.error(str(error))
    except (OSError, ValueError) as error:
        exit_with_error(args.parser, error)


def _experiment_file(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True,
                        help="experiment file (TOML or JSON): [shared] settings, [[rows]]")
    parser.add_argument("--out", required=True, help="runs folder: one sub-folder per row, table.json, table.md")
    parser.add_argument("--rows", nargs="+", default=None, metavar="LABEL",
                        help="these rows only (default all)")


def add_experiment(sub) -> None:  # noqa: ANN001 - argparse's subparsers action
    """``pyro-attention experiment`` and its actions."""
    ex = sub.add_parser("experiment", help="tables of translation rows (an experiment file): run, status, curves, "
                        "merge, plot", description="Tables of translation rows from an experiment file.")
    actions = ex.add_subparsers(dest="action", required=True, metavar="{run,status,curves,merge,plot}",
                                help="what to do with the experiment file or table")
    run = add_command(actions, "run", _run, "train each row to convergence, evaluate, tabulate; resumable row by row")
    _experiment_file(run)
    run.add_argument("--max-epochs", type=int_at_least(1), default=None,
                     help="train at most N epochs per row in this call, then move on (default: to the end)")
    run.add_argument("--evaluate-paused", action="store_true",
                     help="train nothing: evaluate each half-trained row's best.pt as it is, into "
                     "RUNS/<label>/result-paused.json (\"finished\": false; the row still resumes later)")
    run.add_argument("--no-bleu", action="store_true", help="skip decoding (perplexities and entropies only)")
    run.add_argument("--device", default=None,
                     help="train and evaluate every row here: cpu, cuda, cuda:N or mps (default: the file's, else "
                     "cpu)")
    run.add_argument("--threads", type=int_at_least(0), default=None,
                     help="torch threads for every row (default: the file's; 0: torch's choice)")
    run.add_argument("--matmul-precision", default=None,
                     help="torch.set_float32_matmul_precision of every row's training steps: highest, high or "
                     "medium (default: the file's, else highest); medium: bfloat16 products, faster on a CPU with "
                     "AMX; evaluation keeps float32")
    run.add_argument("--autocast", default=None,
                     help="torch.autocast of every row's training steps: none or bfloat16 (default: the file's, else "
                     "none); bfloat16: the network's products in bfloat16, the likelihood, kernels and ELBO in "
                     "float32; evaluation keeps float32")
    run.add_argument("--quiet", action="store_true", help="no progress bars")
    status = add_command(actions, "status", _status,
                         "where each row stands (epochs, where it resumes, best and last validation PPL, learning "
                         "rate, early-stopping count, wall time, last step logged and when; test PPL and BLEU once "
                         "finished), read from its files: safe while rows train")
    _experiment_file(status)
    curves = add_command(actions, "curves", _curves,
                         "each row's validation after every epoch so far (step, learning rate, validation PPL, "
                         "alignment entropies, clock), read from its history.csv: safe while rows train")
    _experiment_file(curves)
    merge = add_command(actions, "merge", _merge,
                        "put the evaluated rows of a runs folder into a table built from several (e.g. "
                        "docs/results/table1-multi30k.json): a row replaces the one of the same label, else it is "
                        "added")
    merge.add_argument("table", metavar="TABLE.json", help="the table to put the rows in")
    merge.add_argument("--out", required=True, help="the runs folder whose evaluated rows go in")
    merge.add_argument("--rows", nargs="+", default=None, metavar="LABEL", help="these rows only (default all)")
    merge.add_argument("--note", default=None, help="a note kept in each merged row (where and how it was trained)")
    plot = add_command(actions, "plot", _plot,
                       "draw the validation curves of a table (a runs folder's table.json, or one merged from "
                       "several)")
    plot.add_argument("table", metavar="TABLE.json", help="the table")
    plot.add_argument("--figure", metavar="PNG", default=None,
                      help="where the figure goes (default: beside the table, <name>-val_ppl.png)")
