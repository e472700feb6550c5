"""``pyro-attention align``: alignment error rates of a pair's prior, exact posterior, q and soft attention
against gold alignments."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pyro_attention.cli.common import (
    add_command,
    add_config_options,
    exit_with_error,
    float_in,
    given_flags,
    option_error,
)
from pyro_attention.files import write_text


def _align(args: argparse.Namespace) -> int:
    from pyro_attention.tasks.align import AlignConfig, format_rows, run_align
    from pyro_attention.tasks.align.config import network_option_defaults

    names = [*AlignConfig.__dataclass_fields__, *network_option_defaults()]
    if args.src is not None or args.tgt is not None:
        return _link_text(args, names)
    if args.threshold is not None:
        option_error(args.parser, "threshold: links a text of your own; give --src and --tgt", ["threshold"])
    if args.gibbs_sweeps:
        option_error(args.parser, "gibbs_sweeps: samples the links of a text of your own; give --src and --tgt",
                     ["gibbs_sweeps"])
    try:  # a bad option or combination of options: exit status 2, naming the flag
        config = AlignConfig.from_flags(**{k: getattr(args, k) for k in names if k in vars(args) and k != "out"},
                                        out=args.out or RUNS)
    except ValueError as error:
        option_error(args.parser, str(error), names)
    try:
        rows = run_align(config)
    except (FileNotFoundError, ValueError) as error:
        exit_with_error(args.parser, error)
        return 1
    table = format_rows(rows)
    print(table)
    try:
        if args.markdown:
            write_text(args.markdown, table + "\n")
        if args.json:
            from pyro_attention.tasks.align import json_rows, merge_json

            merge_json(args.json, json_rows(rows, "user" if config.gold_links else config.corpus))
    except (OSError, ValueError) as error:  # a folder that cannot be written, a damaged --json file
        exit_with_error(args.parser, error)
        return 1
    return 0


#: where the gold-set runs go unless ``--out`` says
RUNS = "runs/align"

#: the flags of a gold set, refused when linking a text
_GOLD_FLAGS = ("corpus", "data_dir", "gold_text", "gold_src", "gold_tgt", "gold_links", "links_format", "links_order",
               "extra_size", "gold_repeat", "markdown", "json")


def _link_text(args: argparse.Namespace, names: list[str]) -> int:
    """``align --src FILE --tgt FILE --out links.txt``: the recipe (flags given on the command line win), Pharaoh
    links for every pair."""
    from pyro_attention.tasks.align.links import LINK_THRESHOLD, align_text, recipe_config, write_links

    given = given_flags(args)
    keys = [*names, "src", "tgt", "out", "threshold", *_GOLD_FLAGS]
    refused = [k for k in _GOLD_FLAGS if k in given]
    if refused:
        option_error(args.parser, f"{refused[0]}: scores against a gold set; linking a text of your own (--src, "
                     "--tgt) takes no gold set (run align with the gold set instead)", keys)
    for name in ("src", "tgt", "out"):
        if getattr(args, name) is None:
            option_error(args.parser, f"{name}: linking a text of your own needs --src, --tgt and --out (the links "
                         "file)", keys)
    flags = {k: getattr(args, k) for k in names if k in vars(args) and k != "out"}
    try:
        config = recipe_config(flags, given, out=str(Path(args.out).parent))
    except ValueError as error:
        option_error(args.parser, str(error), keys)
    try:
        links = align_text(config, args.src, args.tgt, LINK_THRESHOLD if args.threshold is None else args.threshold)
        write_links(args.out, links)
    except (FileNotFoundError, ValueError) as error:
        exit_with_error(args.parser, error)
        return 1
    print(f"wrote {args.out}: links of {len(links.links)} sentence pairs ({links.pairs_trained} trained on) in "
          f"{links.seconds:.0f} s", file=sys.stderr)
    return 0


def add_align(sub) -> None:  # noqa: ANN001 - argparse's subparsers action
    """``pyro-attention align``."""
    al = add_command(sub, "align", _align,
                     "word alignments of your own text (--src, --tgt: Pharaoh links), or AER of prior / exact "
                     "posterior / q / soft attention against gold alignments")
    text = al.add_argument_group("a text of your own to link (instead of a gold set)")
    text.add_argument("--src", default=None, help="source sentences, one per line, tokenised by spaces")
    text.add_argument("--tgt", default=None, help="target sentences, line-aligned with --src")
    text.add_argument("--threshold", type=float_in(0.0, 1.0, True, False), default=None,
                      help="a link where the two directions' mean posterior reaches this (default 0.5)")
    add_gold_set_options(al)
    from pyro_attention.registry import ALL_PAIRS
    from pyro_attention.tasks.align import ALIGN_NETWORKS, AlignConfig
    from pyro_attention.tasks.align.config import (
        HMMOptions,
        IBM1Options,
        Seq2SeqSizes,
        StagedOptions,
        TransformerSizes,
    )

    add_config_options(al, AlignConfig, ("extra_size",))
    al.add_argument("--models", nargs="+", default=["soft", "variational"], choices=tuple(ALL_PAIRS),
                    help="the pairs to train and score")
    al.add_argument("--network", default="seq2seq", choices=tuple(ALIGN_NETWORKS),
                    help="; ".join(f"{k}: {v.description}" for k, v in ALIGN_NETWORKS.items())
                    + " (ibm1, ibm1-rank, distortion, hmm: --models marginal; ibm1-rank: --embedding = the lexical "
                    "table's rank)")
    add_config_options(al, AlignConfig, ("epochs", "batch_size", "lr", "max_len"))
    # each network's options (an option the chosen network does not read is refused): AlignConfig.from_flags
    add_config_options(al, Seq2SeqSizes, ("embedding", "encoder", "decoder", "attention"))
    add_config_options(al, TransformerSizes, ("layers", "heads", "feedforward", "embedding_values"))
    add_config_options(al, StagedOptions, ("ibm1_epochs", "ibm1_lr", "tension", "max_jump", "table_lr"))
    add_config_options(al, HMMOptions, ("null_prob", "decoder_expert", "table_prior", "gibbs_sweeps", "gibbs_alpha"))
    add_config_options(al, IBM1Options, ("min_cooccurrence",))
    add_config_options(al, AlignConfig, ("gold_repeat", "source_prefix", "target_prefix"))
    al.add_argument("--both-directions", action="store_true",
                    help="also train target->source; report every symmetrisation (intersection, union, grow-diag, "
                    "grow-diag-final, grow-diag-final-and)")
    al.add_argument("--agreement", action="store_true",
                    help="network hmm, with --both-directions: train the two directions together by agreement "
                    "(Liang et al. 2006: each direction's lexical table learns from the product of both directions' "
                    "exact posteriors) after each one's IBM Model 1 stage")
    add_config_options(al, AlignConfig, ("seed", "threads"))
    al.add_argument("--out", default=None, help=f"with --src/--tgt: the links file to write; else the folder for "
                    f"the runs (default {RUNS})")
    al.add_argument("--markdown", default="", help="also write the table to this file")
    al.add_argument("--json", default="", help="also merge the rows into this JSON list (e.g. docs/results/aer.json)")


def add_gold_set_options(parser: argparse.ArgumentParser, extra_text: bool = True) -> tuple[str, ...]:
    """The flags that choose a gold set as ``pyro-attention align`` reads it (``--corpus``, ``--data-dir``, a gold set
    of your own, and with ``extra_text`` its unlabelled extra text); returns their names in
    :class:`~pyro_attention.align.AlignConfig` (``AlignConfig(**{k: getattr(args, k) for k in names})``)."""
    from pyro_attention.tasks.align import LINK_FORMATS, LINK_ORDERS

    parser.add_argument("--corpus", default="enfr", choices=["enfr", "csen"],
                        help="gold set: enfr (English-French Hansards, NAACL 2003) or csen (Czech-English)")
    parser.add_argument("--data-dir", default=None, help="data folder (default: $PYRO_ATTENTION_DATA)")
    g = parser.add_argument_group("a gold set of your own (instead of --corpus)")
    g.add_argument("--gold-text", default=None, help="'source ||| target' sentence pairs, one per line")
    g.add_argument("--gold-src", default=None, help="the source sentences, one per line (with --gold-tgt)")
    g.add_argument("--gold-tgt", default=None, help="the target sentences, line-aligned with --gold-src")
    g.add_argument("--gold-links", default=None, help="the gold links, in --links-format")
    g.add_argument("--links-format", default="pharaoh1", choices=LINK_FORMATS,
                   help="pharaoh0 / pharaoh1: 'i-j' sure and 'ipj' possible links per line, 0- or 1-indexed; naacl: "
                   "'SNUM i j [S|P]' per link, 1-indexed (default pharaoh1)")
    g.add_argument("--links-order", default="source-target", choices=LINK_ORDERS,
                   help="which sentence a link's first number counts in (default source-target)")
    names = ("corpus", "data_dir", "gold_text", "gold_src", "gold_tgt", "gold_links", "links_format", "links_order",
             "lowercase")
    if extra_text:
        g.add_argument("--extra-src", default=None, help="more unlabelled training text, source side (with "
                       "--extra-tgt)")
        g.add_argument("--extra-tgt", default=None, help="its target side, line-aligned")
        names += ("extra_src", "extra_tgt")
    g.add_argument("--no-lowercase", dest="lowercase", action="store_false",
                   help="keep the case of a gold set of your own (default: lower-case it)")
    return names
