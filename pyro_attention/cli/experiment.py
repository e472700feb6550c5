"""``pyro-attention experiment``: a table of translation rows from an experiment file, resumable row by row."""

from __future__ import annotations

import argparse
import sys

from pyro_attention.cli.common import add_command, exit_with_error, int_at_least


def _experiment(args: argparse.Namespace) -> int:
    from pyro_attention.tasks.translation import TrainingInterrupted
    from pyro_attention.tasks.translation.curves import plot_table
    from pyro_attention.tasks.translation.runner import ExperimentFileError, markdown_table, merge_rows, run_experiment
    from pyro_attention.tasks.translation.status import experiment_curves, experiment_status, status_table

    if args.plot is not None:
        try:
            figure = plot_table(args.plot, args.figure)
        except (OSError, ValueError) as error:
            exit_with_error(args.parser, error)
            return 1
        print(figure if figure else f"{args.plot}: no row has a val_ppl_per_epoch curve; nothing drawn")
        return 0
    if args.merge is not None:
        if args.out is None:
            args.parser.error("--merge TABLE.json needs --out RUNS: the runs folder whose evaluated rows go in")
        try:
            merged = merge_rows(args.merge, args.out, only=args.rows, note=args.note)
        except (OSError, ValueError) as error:
            exit_with_error(args.parser, error)
            return 1
        for label, how in merged:
            print(f"{args.merge}: {how} row {label} from {args.out}")
        return 0
    if args.note is not None:
        args.parser.error("--note goes with --merge")
    if args.config is None or args.out is None:
        args.parser.error("the arguments --config and --out are required (or --plot TABLE.json to draw a "
                          "finished table, or --merge TABLE.json --out RUNS to put a runs folder's rows in one)")
    try:
        if args.status:
            print(status_table(experiment_status(args.config, args.out, only=args.rows)))
            return 0
        if args.curves:
            print(experiment_curves(args.config, args.out, only=args.rows))
            return 0
        overrides = {k: v for k, v in (("device", args.device), ("threads", args.threads),
                                       ("matmul_precision", args.matmul_precision)) if v is not None}
        table = run_experiment(args.config, args.out, only=args.rows, max_epochs=args.max_epochs,
                               progress=not args.quiet, bleu=not args.no_bleu, overrides=overrides,
                               evaluate_paused=args.evaluate_paused)
    except ExperimentFileError as error:  # the file or --rows, found before anything runs: an error of the call
        args.parser.error(str(error))  # status 2, as train --config's
    except (OSError, ValueError) as error:
        exit_with_error(args.parser, error)
        return 1
    except TrainingInterrupted as stop:
        print(f"pyro-attention experiment: {stop.signal_name}: {stop.checkpoint} written; run the same command "
              "again to continue", file=sys.stderr)
        return 130
    print(markdown_table(table))
    return 0


def add_experiment(sub) -> None:  # noqa: ANN001 - argparse's subparsers action
    """``pyro-attention experiment``."""
    ex = add_command(sub, "experiment", _experiment, "a table of translation rows (an experiment file): train each to "
                     "convergence, evaluate, tabulate; resumable row by row")
    ex.add_argument("--config", help="experiment file (TOML or JSON): [shared] settings, [[rows]] (required)")
    ex.add_argument("--out", help="runs folder: one sub-folder per row, table.json, table.md (required)")
    ex.add_argument("--rows", nargs="+", default=None, metavar="LABEL", help="work on these rows only (default all)")
    ex.add_argument("--max-epochs", type=int_at_least(1), default=None,
                    help="train at most N epochs per row in this call, then move on (default: to the end)")
    ex.add_argument("--evaluate-paused", action="store_true",
                    help="train nothing: evaluate each half-trained row's best.pt as it is, into "
                    "RUNS/<label>/result-paused.json (\"finished\": false; the row still resumes later)")
    ex.add_argument("--status", action="store_true",
                    help="train nothing: print where each row stands (epochs, where it resumes, best and last "
                    "validation PPL, learning rate, early-stopping count, wall time, last step logged and when; "
                    "test PPL and BLEU once finished), read from its files, and exit (safe while rows train)")
    ex.add_argument("--curves", action="store_true",
                    help="train nothing: print each row's validation after every epoch so far (step, learning "
                    "rate, validation PPL, alignment entropies, clock), read from its history.csv, and exit (safe "
                    "while rows train)")
    ex.add_argument("--no-bleu", action="store_true", help="skip decoding (perplexities and entropies only)")
    ex.add_argument("--device", default=None,
                    help="train and evaluate every row here: cpu, cuda, cuda:N or mps (default: the file's, else cpu)")
    ex.add_argument("--threads", type=int_at_least(0), default=None,
                    help="torch threads for every row (default: the file's; 0: torch's choice)")
    ex.add_argument("--matmul-precision", default=None,
                    help="torch.set_float32_matmul_precision of every row's training steps: highest, high or "
                    "medium (default: the file's, else highest); medium: bfloat16 products, faster on a CPU with "
                    "AMX; evaluation keeps float32")
    ex.add_argument("--quiet", action="store_true", help="no progress bars")
    ex.add_argument("--plot", metavar="TABLE.json", default=None,
                    help="only draw the validation curves of a table (a runs folder's table.json, or one merged "
                         "from several, e.g. docs/results/table1-multi30k.json) and exit")
    ex.add_argument("--merge", metavar="TABLE.json", default=None,
                    help="only put the evaluated rows of --out (or --rows) into a table built from several runs "
                         "folders (e.g. docs/results/table1-multi30k.json): a row replaces the one of the same "
                         "label, else it is added; and exit")
    ex.add_argument("--note", default=None,
                    help="with --merge: a note kept in each merged row (where and how it was trained)")
    ex.add_argument("--figure", metavar="PNG", default=None,
                    help="with --plot: where the figure goes (default: beside the table, <name>-val_ppl.png)")
