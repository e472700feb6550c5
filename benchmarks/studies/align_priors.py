"""Which alignment prior helps the alignments: each prior trained on the same IBM Model 1 table, forward AER.

    python benchmarks/studies/align_priors.py --corpus enfr --data-dir ../shared/data --epochs 2
    python benchmarks/studies/align_priors.py --corpus enfr --data-dir ../shared/data --priors neural-diag hmm \
        --table-lr 0.01

A measurement, not a test.  The lexical table is plain EM IBM Model 1 (``tests/support/ibm1_em.py``, 5 iterations on the
gold sentences plus ``--extra-size`` Multi30k pairs of the language pair, lower-cased: the text of ``pyro-attention
align``), copied into an :class:`~pyro_attention.networks.lexical.IBM1Network` (``log t``, floored at 1e-7).  Then
for every prior of ``--priors``, from that same table and seed:

* ``ibm1``: the table alone (uniform prior; no training);
* ``neural``: :class:`~pyro_attention.networks.distortion.DistortionNetwork` -- Seq2Seq's prior (decoder LSTM over
  the target prefix, attention over the BiLSTM source states; ``--embedding 64 --encoder 64 --decoder 128
  --attention 64`` as ``align``'s defaults);
* ``neural-diag``: the same with fast_align's learned diagonal (``tension=4``);
* ``neural-diag-jump``: and the HMM jumps over the previous word's filtered posterior (``max_jump=5``);
* ``hmm``: :class:`~pyro_attention.networks.lexical.HMMNetwork` -- the diagonal and the jumps, no neural prior;

each trained ``--epochs`` epochs by the ``marginal`` pair's exact enumeration (``pyro_attention.inference.fit``,
batches of ``--batch-size``, Adam ``--lr``; the table frozen, or at ``--table-lr``), then scored: the forward AER of
the prior's and the exact posterior's argmax links (and the HMM's smoothed posterior), with the training loss per
token.  One thread unless ``--threads``.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

PRIORS = ("ibm1", "neural", "neural-diag", "neural-diag-jump", "hmm")


def em_table(src: list[list[str]], tgt: list[list[str]], src_vocab: Any, tgt_vocab: Any, iterations: int) -> Any:
    """An :class:`IBM1Network` holding EM IBM Model 1's ``log t(f | e)`` (floored at 1e-7)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: tests.support is a package
    from pyro_attention.data.translation import EOS as EOS_ID
    from pyro_attention.networks.lexical import IBM1Network
    from tests.support.ibm1_em import EMIBM1, EOS

    em = EMIBM1(src, tgt).iterate(iterations)
    e_words = {i: w for w, i in em.e_ids.items()}
    f_words = {i: w for w, i in em.f_ids.items()}
    rows = torch.as_tensor([src_vocab.stoi[e_words[int(e)]] for e in em.param_e])
    cols = torch.as_tensor([EOS_ID if f_words[int(f)] == EOS else tgt_vocab.stoi[f_words[int(f)]]
                            for f in (em.params & 0xFFFFFFFF)])
    table = torch.full((len(src_vocab), len(tgt_vocab)), math.log(1e-7))
    table[rows, cols] = torch.as_tensor(em.t, dtype=torch.float).clamp(min=1e-7).log()
    lexical = IBM1Network(len(src_vocab), len(tgt_vocab))
    with torch.no_grad():
        lexical.src_embed.weight.copy_(table)
    return lexical


def build(prior: str, lexical: Any, source_vocab: int, target_vocab: int) -> Any:
    from pyro_attention.networks.distortion import DistortionNetwork
    from pyro_attention.networks.lexical import HMMNetwork

    if prior == "hmm":
        return HMMNetwork(source_vocab, target_vocab, lexical=lexical, tension=4.0, max_jump=5)
    return DistortionNetwork(source_vocab, target_vocab, lexical=lexical,
                             tension=4.0 if "diag" in prior else None, max_jump=5 if "jump" in prior else None,
                             embedding_size=64, encoder_size=64, decoder_size=128, attention_size=64)


def main(args: argparse.Namespace) -> list[dict[str, Any]]:
    import copy
    import warnings

    from pyro_attention.aer import alignment_error_rate
    from pyro_attention.data.text import Vocab
    from pyro_attention.inference import fit
    from pyro_attention.registry import make_pair
    from pyro_attention.tasks.align import (
        AlignConfig,
        Trained,
        alignment_probs,
        argmax_links,
        load_gold_corpus,
        load_user_gold,
    )
    from pyro_attention.tasks.align.networks import Bitext

    torch.set_num_threads(args.threads)
    if args.gold_text:
        corpus = load_user_gold(AlignConfig(gold_text=args.gold_text, gold_links=args.gold_links), log=lambda _: None)
    else:
        corpus = load_gold_corpus(AlignConfig(corpus=args.corpus, data_dir=args.data_dir, extra_size=args.extra_size),
                                  log=lambda _: None)
    src, tgt = corpus.source + corpus.extra_source, corpus.target + corpus.extra_target
    src_vocab, tgt_vocab = Vocab.build(src), Vocab.build(tgt)
    table = em_table(src, tgt, src_vocab, tgt_vocab, args.em_iterations)
    data = Bitext([src_vocab.encode(s) for s in src], [tgt_vocab.encode(t) for t in tgt])
    gold = list(corpus.gold)
    results = []
    for prior in args.priors:
        lexical = copy.deepcopy(table)
        start = time.perf_counter()
        if prior == "ibm1":
            pair, loss = make_pair("marginal", lexical), float("nan")
        else:
            if not args.table_lr:
                lexical.requires_grad_(False)
            pair = make_pair("marginal", build(prior, lexical, len(src_vocab), len(tgt_vocab)))
            with warnings.catch_warnings():  # pyro.module on the frozen table: "not registered ... requires_grad"
                warnings.filterwarnings("ignore", message=".*requires_grad=False.*")
                fit_result = fit(pair, data, num_epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
                                 param_lr={"lexical.": args.table_lr} if args.table_lr else None, seed=args.seed,
                                 progress=False)
            steps = max(1, fit_result.steps // args.epochs)
            loss = sum(fit_result.losses[-steps:]) / steps
        seconds = time.perf_counter() - start
        probs = alignment_probs(Trained(pair, src_vocab, tgt_vocab, seconds), corpus.source, corpus.target)
        row = {"prior": prior, "loss_last_epoch": round(loss, 4), "train_s": round(seconds, 1)}
        for name in ("prior", "posterior", "smoothed"):
            if name in probs and not (prior == "ibm1" and name == "prior"):
                row[f"aer_{name}"] = round(100 * alignment_error_rate(argmax_links(probs[name]), gold).aer, 2)
        print(row, flush=True)
        results.append(row)
    return results


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default="enfr", choices=["enfr", "csen"])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--extra-size", type=int, default=29000)
    parser.add_argument("--gold-text", default=None, help="a gold set of your own ('source ||| target' lines)")
    parser.add_argument("--gold-links", default=None, help="its links (Pharaoh, 1-indexed)")
    parser.add_argument("--priors", nargs="+", default=list(PRIORS), choices=PRIORS)
    parser.add_argument("--em-iterations", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=5e-3)
    parser.add_argument("--table-lr", type=float, default=0.0, help="the table's learning rate (0: frozen)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    return parser.parse_args(argv)


if __name__ == "__main__":
    main(parse_args())
