"""Links for a user's own parallel text: ``pyro-attention align --src FILE --tgt FILE --out links.txt``.

The best recipe known (:data:`RECIPE`, measured in docs/results.md) trains on the text itself -- an HMM aligner with
a NULL word, both directions by agreement, lexical tables by EM under a Dirichlet prior, stored sparsely -- and
every sentence pair gets the links where the mean of the two directions' posteriors is at least
:data:`LINK_THRESHOLD`, a threshold that needs no gold links; each direction's is the mean of its exact posterior
(forward-backward) and its collapsed Gibbs posterior, the tables integrated out (:mod:`~pyro_attention.tasks.align.
gibbs`; ``gibbs_sweeps=0``: the exact posterior alone).  The file holds one line per input pair:
Pharaoh ``i-j`` links, 0-indexed, ``i`` counting source words (fast_align's and eflomal's output).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from pyro_attention.aer import combine_posteriors, links_from_probs
from pyro_attention.data.text import read_parallel
from pyro_attention.data.translation import collate
from pyro_attention.files import write_text
from pyro_attention.tasks.align.config import AlignConfig
from pyro_attention.tasks.align.corpus import GoldCorpus
from pyro_attention.tasks.align.gibbs import CollapsedGibbs
from pyro_attention.tasks.align.networks import ALIGN_NETWORKS, Trained

__all__ = ["LINK_THRESHOLD", "RECIPE", "TextLinks", "align_text", "recipe_config", "text_links", "write_links"]

#: what ``align --src/--tgt`` trains unless a flag says otherwise: the configuration of docs/results.md with the
#: lowest AER on the held-out German-English gold (``benchmarks/studies/align_recipe.py``), then links averaged with
#: ten sweeps of collapsed Gibbs sampling (:mod:`~pyro_attention.tasks.align.gibbs`)
RECIPE: dict[str, Any] = {
    "network": "hmm", "models": ["marginal"], "both_directions": True, "agreement": True, "null_prob": 0.1,
    "table_prior": 0.001, "ibm1_epochs": 10, "epochs": 1, "batch_size": 64, "lr": 5e-3, "table_lr": 0.01,
    "tension": 4.0, "max_jump": 5, "gibbs_sweeps": 10,
}

#: a link where the two directions' mean posterior reaches this (a forward model alone: its posterior)
LINK_THRESHOLD = 0.5

#: the networks whose exact posterior links a text (``likelihood_terms``: the posterior by forward-backward)
LINK_NETWORKS = ("ibm1", "hmm")


def _check_network(network: str) -> None:
    if network not in LINK_NETWORKS:
        raise ValueError(f"network: linking a text needs an exact posterior; choose from {', '.join(LINK_NETWORKS)}, "
                         f"got {network!r}")


def recipe_config(flags: dict[str, Any], given: Collection[str], **fixed: Any) -> AlignConfig:
    """The config of the command line's ``flags`` (by field name) where they were ``given``, else :data:`RECIPE`'s
    values (those of options the chosen network reads), else the flags' defaults; ``fixed`` as they are."""
    from dataclasses import fields

    from pyro_attention.tasks.align.config import network_option_defaults

    network = flags["network"] if "network" in given else RECIPE["network"]
    _check_network(network)
    reads = {f.name for f in fields(ALIGN_NETWORKS[network].options)}
    options = network_option_defaults()
    recipe = {k: v for k, v in RECIPE.items() if k not in given and (k not in options or k in reads)}
    return AlignConfig.from_flags(**{**flags, **recipe, **fixed})


@dataclass
class TextLinks:
    """The links of every sentence pair of a text (``(source, target)`` positions), how many pairs were trained on,
    and the seconds it all took."""

    links: list[set[tuple[int, int]]]
    pairs_trained: int
    seconds: float

    def pharaoh(self) -> str:
        """One line per sentence pair: ``i-j`` links, 0-indexed, source position first, in order."""
        return "".join(" ".join(f"{i}-{j}" for i, j in sorted(pair)) + "\n" for pair in self.links)


#: the most cells a linking batch may hold: ``B T S max(S, T)`` (an HMM's forward pass keeps ``B S^2`` per target word,
#: the reverse one ``B T^2`` per source word)
CELLS = 2**24


def _batches(src_ids: list[list[int]], tgt_ids: list[list[int]], largest: int) -> Iterator[list[int]]:
    """Pairs in length order, as many to a batch as :data:`CELLS` allows (at most ``largest``)."""
    order = sorted(range(len(src_ids)), key=lambda i: (len(tgt_ids[i]), len(src_ids[i])))
    chunk: list[int] = []
    longest_t = longest_s = 0
    for i in order:
        t, s = max(len(tgt_ids[i]) + 1, longest_t), max(len(src_ids[i]) + 1, longest_s)
        if chunk and ((len(chunk) + 1) * t * s * max(s, t) > CELLS or len(chunk) == largest):
            yield chunk
            chunk, t, s = [], len(tgt_ids[i]) + 1, len(src_ids[i]) + 1
        chunk.append(i)
        longest_t, longest_s = t, s
    if chunk:
        yield chunk


def _posteriors(trained: Trained, src_ids: list[list[int]], tgt_ids: list[list[int]],
                chunk: list[int]) -> list[torch.Tensor]:
    """``p(z_t = s | x, y)`` of each pair of ``chunk`` by the network's exact posterior in one batch."""
    from pyro_attention.networks.lexical import with_null_word

    null = int(trained.null_word)
    batch = collate([(with_null_word(src_ids[i]) if null else src_ids[i], tgt_ids[i]) for i in chunk])
    return _real_words(trained.pair.network.likelihood_terms(batch)[2], src_ids, tgt_ids, chunk, null)


def _real_words(matrix: torch.Tensor, src_ids: list[list[int]], tgt_ids: list[list[int]], chunk: list[int],
                null: int) -> list[torch.Tensor]:
    """Each pair's ``(T, S)`` of a batch's ``(B, T', S')``: the real words (the NULL word's column and ``</s>``'s row
    dropped); copies, so the batch's padded tensor is not kept."""
    return [matrix[row, : len(tgt_ids[i]), null: null + len(src_ids[i])].clone() for row, i in enumerate(chunk)]


def text_links(forward: Trained, reverse: Trained | None, source: list[list[str]], target: list[list[str]],
               threshold: float = LINK_THRESHOLD, batch_size: int = 1024, sampler: CollapsedGibbs | None = None,
               log: Callable[[str], None] | None = None, progress: bool = False,
               every: float = 60.0) -> list[set[tuple[int, int]]]:
    """``(source, target)`` links of every pair: where the mean of the forward posterior and the reverse one
    (transposed) reaches ``threshold``; without ``reverse``, the forward posterior alone.  With a ``sampler`` each
    direction's probability is the mean of its exact posterior and its collapsed Gibbs posterior
    (:mod:`~pyro_attention.tasks.align.gibbs`).  Pairs are linked a batch at a time (both directions of the same
    pairs), so memory holds one batch's posteriors, not the text's.  Progress: a tqdm bar with ``progress`` on a
    terminal, else a line through ``log`` every ``every`` seconds."""
    from tqdm.auto import tqdm

    from pyro_attention.inference.loop import bar_shows

    start = last = time.perf_counter()
    lines = log is not None and not bar_shows(progress)
    src_ids, tgt_ids = [forward.src_vocab.encode(s) for s in source], [forward.tgt_vocab.encode(t) for t in target]
    directions = [(forward, src_ids, tgt_ids)]
    if reverse is not None:
        directions.append((reverse, [reverse.src_vocab.encode(t) for t in target],
                           [reverse.tgt_vocab.encode(s) for s in source]))
    for trained, _, _ in directions:
        trained.pair.network.eval()
    chunks = list(_batches(src_ids, tgt_ids, batch_size))
    chains = None
    if sampler is not None:
        if lines:
            log("linking: each direction's sampler starts from its exact posterior's most probable links")
        chains = [sampler.chain(trained.pair.network, list(zip(src, tgt, strict=True)), chunks,
                                bool(trained.null_word)) for trained, src, tgt in directions]
    links: list[set[tuple[int, int]]] = [set()] * len(source)
    bar = tqdm(total=len(source), disable=None if progress else True, desc="linking", unit="pair", leave=False)
    done = 0
    with torch.no_grad(), bar:
        for k, chunk in enumerate(chunks):
            probs = []
            for d, (trained, src, tgt) in enumerate(directions):
                if chains is None:
                    probs.append(_posteriors(trained, src, tgt, chunk))
                else:
                    frequency, posterior = chains[d].sample(k)
                    probs.append(_real_words((frequency + posterior) / 2, src, tgt, chunk, int(trained.null_word)))
            matrices = probs[0] if reverse is None else [combine_posteriors(f, r, "posterior-mean")
                                                         for f, r in zip(*probs, strict=True)]
            for i, m in zip(chunk, matrices, strict=True):
                links[i] = links_from_probs(m, threshold)
            done += len(chunk)
            bar.update(len(chunk))
            if lines and time.perf_counter() - last >= every:
                last = time.perf_counter()
                log(f"linking: {done:,} of {len(source):,} sentence pairs, {last - start:.0f} s")
    return links


def align_text(config: AlignConfig, src: str | Path, tgt: str | Path, threshold: float = LINK_THRESHOLD,
               log: Callable[[str], None] = print) -> TextLinks:
    """Train ``config``'s network on the parallel text ``src`` / ``tgt`` (pairs with a side longer than
    ``config.max_len`` are not trained on, but linked) and link every pair (:func:`text_links`).

    :raises ValueError: naming a network without an exact posterior to link with, or the file and line of an
        empty line (through :func:`~pyro_attention.data.text.read_parallel`).
    """
    _check_network(config.network)
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"threshold must be in (0, 1], got {threshold}")
    torch.set_num_threads(config.threads)
    start = time.perf_counter()
    text = read_parallel(src, tgt, lowercase=config.lowercase)
    kept = [i for i, (s, t) in enumerate(zip(text.source, text.target, strict=True))
            if len(s) <= config.max_len and len(t) <= config.max_len]
    corpus = GoldCorpus([text.source[i] for i in kept], [text.target[i] for i in kept], None, [], [],
                        f"{src} / {tgt}")
    network = ALIGN_NETWORKS[config.network]
    log(f"{src} / {tgt}: {len(text.source)} sentence pairs, {len(kept)} trained on (both sides <= {config.max_len} "
        f"words); network {network.name}: {network.description}")
    model = config.models[0]
    if config.options.trains_jointly():
        forward, reverse = network.train_jointly(corpus, config, model, log)
    else:
        forward = network.train(corpus, config, model, False, log)
        reverse = network.train(corpus, config, model, True, log) if config.both_directions else None
    sampler = config.options.link_sampler(config.seed)
    if sampler is not None:
        log(f"linking: the exact posteriors averaged with collapsed Gibbs sampling's ({sampler.sweeps} sweeps, "
            f"Dirichlet({sampler.alpha:g}) tables)")
    links = text_links(forward, reverse, text.source, text.target, threshold, sampler=sampler, log=log, progress=True)
    return TextLinks(links, len(kept), time.perf_counter() - start)


def write_links(path: str | Path, links: TextLinks) -> Path:
    """Write the Pharaoh links atomically to ``path``."""
    return write_text(path, links.pharaoh())
