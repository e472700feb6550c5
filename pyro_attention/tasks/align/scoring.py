"""Scoring a trained pair's alignments against the gold links: argmax and posterior-threshold links, AER rows of
every direction and symmetrisation (:func:`run_align`), and the rows as a table or JSON."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from pyro_attention.aer import (
    POSTERIOR_COMBINATIONS,
    SYMMETRIZATIONS,
    AERResult,
    alignment_error_rate,
    combine_posteriors,
    links_from_probs,
    symmetrize,
)
from pyro_attention.data.translation import collate
from pyro_attention.inference import alignment_posterior
from pyro_attention.tasks.align.config import THRESHOLD_GRID, AlignConfig
from pyro_attention.tasks.align.corpus import load_gold_corpus
from pyro_attention.tasks.align.networks import ALIGN_NETWORKS, Trained


@torch.no_grad()
def alignment_probs(
    result: Trained, source: list[list[str]], target: list[list[str]], batch_size: int = 32, null_word: bool = False
) -> dict[str, list[torch.Tensor]]:  # noqa: ANN001
    """Every alignment distribution of a trained pair on the given sentence pairs, in order: per source name
    (``prior``, ``posterior``, ``q``, and the network's own, e.g. an HMM's ``smoothed``:
    :meth:`~pyro_attention.networks.base.AttentionNetwork.own_posteriors`) a list of ``(T_i, S_i)`` matrices over
    the real words (no ``</s>``); with ``null_word`` (the network's source position 0 is the NULL word:
    ``Trained.null_word``) ``(T_i, 1 + S_i)``, column 0 the NULL word's probability."""
    from pyro_attention.networks.lexical import with_null_word

    out: dict[str, list[torch.Tensor]] = {}
    pair = result.pair
    pair.network.eval()
    null = int(null_word)
    for start in range(0, len(source), batch_size):
        chunk = list(range(start, min(len(source), start + batch_size)))
        ids = [result.src_vocab.encode(source[i]) for i in chunk]
        batch = collate([(with_null_word(s) if null else s, result.tgt_vocab.encode(target[i]))
                         for s, i in zip(ids, chunk, strict=True)])
        probs = alignment_posterior(pair, batch)
        probs.update(pair.network.own_posteriors(batch))  # an HMM network's smoothed posterior p(z_t | x, y)
        for name, p in probs.items():
            name = "q" if name == "guide" else name
            out.setdefault(name, []).extend(
                p[row, : len(target[i]), : null + len(source[i])].float() for row, i in enumerate(chunk))
    return out


def _word_links(probs: torch.Tensor, null_word: bool, threshold: float | None = None) -> set[tuple[int, int]]:
    """:func:`~pyro_attention.aer.links_from_probs` of one ``(T, S)`` matrix; with ``null_word`` column 0 is the
    NULL word: a link to it is no link, and the words count from column 1."""
    links = links_from_probs(probs, threshold=threshold)
    return {(s - 1, t) for s, t in links if s > 0} if null_word else links


def argmax_links(probs: list[torch.Tensor], null_word: bool = False) -> list[set[tuple[int, int]]]:
    """Each target word linked to its most probable source word (ties to the first); with ``null_word`` (column 0
    of each matrix is the NULL word) a word whose most probable source is the NULL word gets no link."""
    return [_word_links(p, null_word) for p in probs]


def alignment_links(
    result: Trained, source: list[list[str]], target: list[list[str]], batch_size: int = 32
) -> dict[str, list[set[tuple[int, int]]]]:  # noqa: ANN001
    """Argmax links of every alignment distribution of a trained pair on the given sentence pairs, in order."""
    null = isinstance(result, Trained) and result.null_word
    probs = alignment_probs(result, source, target, batch_size, null)
    return {k: argmax_links(v, null) for k, v in probs.items()}




def threshold_links(
    probs: list[torch.Tensor],
    gold: list,
    grid: tuple[float, ...] = THRESHOLD_GRID,
    reverse: bool = False,
    null_word: bool = False,
) -> tuple[list[set[tuple[int, int]]], tuple[float, float]]:
    """Links to every source word whose probability is at least a threshold chosen on the *other* half.

    Pairs ``0, 2, 4, ...`` are linked with the threshold of ``grid`` that gives the lowest AER on pairs
    ``1, 3, 5, ...``, and those with the one best on pairs ``0, 2, 4, ...``: no pair is scored with a threshold
    tuned on itself.

    :param probs: per pair, ``(T, S)`` alignment probabilities of the model's own direction.
    :param gold: per pair, the gold links (``(source, target)`` of the *corpus*).
    :param reverse: ``probs`` come from the reverse model (its links are ``(target, source)`` of the corpus).
    :param null_word: column 0 of each matrix is the NULL word (never linked).
    :returns: the links (in the model's direction, like :func:`links_from_probs`) and the two thresholds
        (for the even pairs, for the odd pairs).
    """
    if len(probs) != len(gold):
        raise ValueError(f"threshold_links: {len(probs)} alignments for {len(gold)} gold ones")
    cache = {th: [_word_links(p, null_word, th) for p in probs] for th in grid}
    return held_out_choice(cache, gold, reverse)


def held_out_choice(candidates: dict[Any, list[set[tuple[int, int]]]], gold: list,
                    reverse: bool = False) -> tuple[list[set[tuple[int, int]]], tuple[Any, Any]]:
    """The links of ``candidates`` (each choice -- a threshold, a pair of them -- mapped to the links of every
    pair): pairs ``0, 2, 4, ...`` with the choice of lowest AER on pairs ``1, 3, 5, ...``, and those with the one
    best on pairs ``0, 2, 4, ...`` (ties to the first): no pair is scored with a choice tuned on itself.

    :param reverse: the links are ``(target, source)`` of the corpus (a reverse model's).
    :returns: the links and the two choices (for the even pairs, for the odd pairs).
    """

    def score(choice: Any, half: int) -> float:
        idx = range(half, len(gold), 2)
        links = [candidates[choice][i] for i in idx]
        if reverse:
            links = [{(s, t) for t, s in x} for x in links]
        return alignment_error_rate(links, [gold[i] for i in idx]).aer

    chosen = tuple(min(candidates, key=lambda c, h=half: score(c, 1 - h)) for half in (0, 1))
    return [candidates[chosen[i % 2]][i] for i in range(len(gold))], chosen  # type: ignore[return-value]


@dataclass
class AlignRow:
    model: str
    source: str
    direction: str
    result: AERResult
    output: str = ""
    network: str = "seq2seq"
    train_sentences: int = 0
    wall_s: float = 0.0
    note: str = ""


def run_align(config: AlignConfig, log: Callable[[str], None] = print) -> list[AlignRow]:
    """Train the models and score every alignment source against the gold links."""
    from pyro_attention.registry import ALL_PAIRS

    torch.set_num_threads(config.threads)
    network = ALIGN_NETWORKS[config.network]
    corpus = load_gold_corpus(config, log)
    log(
        f"{corpus.description}: {len(corpus.source)} gold pairs ({corpus.gold.num_sure} sure links), "
        f"{len(corpus.extra_source)} extra training pairs; network {network.name}: {network.description}"
    )
    train_sentences = len(corpus.source) + len(corpus.extra_source)
    gold = list(corpus.gold)
    rows: list[AlignRow] = []
    for model in config.models:
        if config.options.trains_jointly():
            trained, back = trained_jointly(network, corpus, config, model, log)
        else:
            trained = trained_direction(network, corpus, config, model, False, log)
            back = trained_direction(network, corpus, config, model, True, log) if config.both_directions else None
        forward = trained.probs
        backward, back_seconds, back_null = None, 0.0, False
        if back is not None:
            back_null, back_seconds, backward = back.null_word, back.seconds, back.probs

        family, model_note = _family(network.name, trained, config)
        output = "product" if trained.decoder_expert else network.output  # the lexical table times u_t
        save_probs(Path(config.out) / f"{family}-{model}.probs.pt", forward, backward, trained.null_word, back_null)

        def row(label: str, direction: str, links: list, seconds: float, note: str = "", model: str = model,
                family: str = family, model_note: str = model_note, output: str = output) -> AlignRow:
            note = "; ".join(x for x in (model_note, note) if x)
            return AlignRow(model, label, direction, alignment_error_rate(links, gold), output,
                            family, train_sentences, seconds, note)

        for name, probs in forward.items():
            # a deterministic pair's prior is its attention weights; every other source keeps its name
            label = "weights" if name == "prior" and ALL_PAIRS[model].deterministic else name
            variants = [(label, argmax_links(probs, trained.null_word),
                         None if backward is None else argmax_links(backward[name], back_null), "")]
            if name in ("posterior", "smoothed"):
                fwd, chosen = threshold_links(probs, gold, config.thresholds, null_word=trained.null_word)
                note = f"thresholds {chosen[0]:g} / {chosen[1]:g} (even / odd pairs, each tuned on the other half)"
                bwd = None
                if backward is not None:
                    bwd, back_chosen = threshold_links(backward[name], gold, config.thresholds, reverse=True,
                                                       null_word=back_null)
                    note += f"; reverse {back_chosen[0]:g} / {back_chosen[1]:g}"
                log(f"{name}-threshold: {note}")
                variants.append((f"{name}-threshold", fwd, bwd, note))
            for source_label, fwd, bwd, note in variants:
                rows.append(row(source_label, "forward", fwd, trained.seconds, note))
                if bwd is not None:
                    inverted = [{(s, t) for t, s in links} for links in bwd]
                    rows.append(row(source_label, "reverse", inverted, back_seconds, note))
                    for method in SYMMETRIZATIONS:
                        rows.append(row(source_label, method, symmetrize(fwd, bwd, method),
                                        trained.seconds + back_seconds, note))
            if backward is not None and name in ("posterior", "smoothed"):
                for method, links, note in combined_links(probs, backward[name], gold, config.thresholds,
                                                          trained.null_word, back_null):
                    log(f"{name} {method}: {note}")
                    rows.append(row(name, method, links, trained.seconds + back_seconds, note))
    return rows


def _family(network: str, trained: TrainedDirection, config: AlignConfig) -> tuple[str, str]:
    """The rows' model family and note: a NULL word, a decoder's expert, agreement, Dirichlet tables, repeated gold
    text, embedding values and cut words are part of the model, ``<network>[-lm][-null][-agree][-dirichletA][-ev]
    [-goldK][-srcprefixN][-tgtprefixN]``."""
    options = config.options.settings()  # a network's own options; those it does not have are off
    decoder_expert, null_prob = options.get("decoder_expert", 0), options.get("null_prob", 0.0)
    table_prior = options.get("table_prior", 0.0)
    parts = [(trained.decoder_expert, "-lm", f"decoder_expert {decoder_expert}"),
             (trained.null_word, "-null", f"null_prob {null_prob:g}"),
             (options.get("agreement", False), "-agree", "both directions trained by agreement"),
             (table_prior, f"-dirichlet{table_prior:g}", f"tables by EM, Dirichlet({table_prior:g}) posterior mean"),
             (options.get("embedding_values", False), "-ev", "the source expert on the aligned word's embedding"),
             (config.gold_repeat > 1, f"-gold{config.gold_repeat}", f"gold_repeat {config.gold_repeat}"),
             (config.source_prefix, f"-srcprefix{config.source_prefix}", f"source_prefix {config.source_prefix}"),
             (config.target_prefix, f"-tgtprefix{config.target_prefix}", f"target_prefix {config.target_prefix}")]
    notes = parts[1:5] + parts[:1] + parts[5:]  # the note names the decoder's expert after the training options
    return network + "".join(tag for on, tag, _ in parts if on), "; ".join(note for on, _, note in notes if on)


@dataclass
class TrainedDirection:
    """One direction's alignment distributions of the gold pairs (:func:`alignment_probs`) and how they came."""

    probs: dict[str, list[torch.Tensor]]
    seconds: float
    null_word: bool
    decoder_expert: bool


#: the options that do not change a direction's training: where the results go, which models and directions run,
#: how links are scored, and the files the text came from (the text itself is hashed into the key)
_NOT_TRAINING = ("out", "models", "both_directions", "thresholds", "gold_links", "links_format", "links_order",
                 "data_dir", "gold_text", "gold_src", "gold_tgt", "extra_src", "extra_tgt")


def _cache_key(network: Any, corpus: Any, config: AlignConfig, model: str, direction: str) -> dict[str, str]:
    """What a saved direction must have been trained with: the training settings (:data:`_NOT_TRAINING` are not),
    a hash of the gold and training sentences, the pair, the network and the direction."""
    settings = {k: v for k, v in dataclasses.asdict(config).items() if k not in _NOT_TRAINING}
    text = hashlib.sha256()
    for side in (corpus.source, corpus.target, corpus.extra_source, corpus.extra_target):
        text.update("\n".join(" ".join(s) for s in side).encode("utf-8") + b"\0")
    return {"settings": json.dumps(settings, sort_keys=True, default=str), "text": text.hexdigest(), "model": model,
            "network": network.name, "direction": direction}


def _read_trained(path: Path, key: dict[str, str], label: str, log: Callable[[str], None]) -> TrainedDirection | None:
    """The direction saved at ``path`` if it was trained as ``key`` says, else ``None`` (a damaged file too)."""
    if not path.is_file():
        return None
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - a damaged file is trained again, not trusted
        log(f"{path}: cannot be read ({type(e).__name__}); training {label} again")
        return None
    if not (isinstance(saved, dict) and saved.get("key") == key):
        return None
    log(f"{label}: read from {path} (trained in {saved['seconds']:.0f} s before; delete the file to train again)")
    return TrainedDirection(saved["probs"], float(saved["seconds"]), bool(saved["null_word"]),
                            bool(saved["decoder_expert"]))


def _save_trained(trained: Trained, corpus: Any, reverse: bool, key: dict[str, str], path: Path) -> TrainedDirection:
    """Read the gold pairs' alignments of a trained direction and write them atomically to ``path``."""
    from pyro_attention.tasks.translation.checkpoints import save_checkpoint

    src, tgt = (corpus.target, corpus.source) if reverse else (corpus.source, corpus.target)
    result = TrainedDirection(alignment_probs(trained, src, tgt, null_word=trained.null_word), trained.seconds,
                              trained.null_word, trained.decoder_expert)
    save_checkpoint({"key": key, "probs": result.probs, "seconds": result.seconds, "null_word": result.null_word,
                     "decoder_expert": result.decoder_expert}, path)
    return result


def trained_direction(network: Any, corpus: Any, config: AlignConfig, model: str, reverse: bool,
                      log: Callable[[str], None] = print) -> TrainedDirection:
    """Train ``model`` on ``network`` in one direction and read its alignments of the gold pairs -- or read them
    from ``OUT/<network>-<model>-<forward|reverse>.trained.pt``, written atomically when a direction finishes and
    used only for the same training settings (:data:`_NOT_TRAINING` are not) and the same text (a hash of the gold
    and training sentences): a run stopped in its reverse direction (an hour or more of a core on the full data)
    does not train the forward again.  Delete the file to train it again."""
    direction = "reverse" if reverse else "forward"
    path = Path(config.out) / f"{network.name}-{model}-{direction}.trained.pt"
    key = _cache_key(network, corpus, config, model, direction)
    saved = _read_trained(path, key, f"{network.name} {model} {direction}", log)
    if saved is not None:
        return saved
    trained = network.train(corpus, config, model, reverse, log)
    result = _save_trained(trained, corpus, reverse, key, path)
    log(f"trained {network.name} {model}{' reverse' if reverse else ''} ({trained.seconds:.0f} s)")
    return result


def trained_jointly(network: Any, corpus: Any, config: AlignConfig, model: str,
                    log: Callable[[str], None] = print) -> tuple[TrainedDirection, TrainedDirection]:
    """Both directions trained together -- by agreement, or with tables by EM (:meth:`~pyro_attention.tasks.align.
    networks.AlignNetwork.train_jointly`) -- and their alignments of the gold pairs -- or both read from
    ``OUT/<network>-<model>-joint-<forward|reverse>.trained.pt`` as :func:`trained_direction` reads one."""
    keys = [_cache_key(network, corpus, config, model, f"joint-{d}") for d in ("forward", "reverse")]
    paths = [Path(config.out) / f"{network.name}-{model}-joint-{d}.trained.pt" for d in ("forward", "reverse")]
    saved = [_read_trained(p, k, f"{network.name} {model} {k['direction']}", log)
             for p, k in zip(paths, keys, strict=True)]
    if saved[0] is not None and saved[1] is not None:
        return saved[0], saved[1]
    forward, reverse = network.train_jointly(corpus, config, model, log)
    result = (_save_trained(forward, corpus, False, keys[0], paths[0]),
              _save_trained(reverse, corpus, True, keys[1], paths[1]))
    log(f"trained {network.name} {model} both directions together ({forward.seconds + reverse.seconds:.0f} s)")
    return result


def save_probs(path: Path, forward: dict[str, list[torch.Tensor]], backward: dict[str, list[torch.Tensor]] | None,
               forward_null: bool, backward_null: bool) -> Path:
    """Every alignment distribution of the gold pairs (:func:`alignment_probs` of both directions), written
    atomically to ``path`` (``torch.load(path)``: ``forward`` / ``backward`` dicts of per-pair matrices and their
    NULL flags), so new links or symmetrisations can be scored without training again."""
    from pyro_attention.tasks.translation.checkpoints import save_checkpoint

    save_checkpoint({"forward": forward, "backward": backward, "forward_null": forward_null,
                     "backward_null": backward_null}, path)
    return path


def combined_links(
    forward: list[torch.Tensor],
    backward: list[torch.Tensor],
    gold: list,
    grid: tuple[float, ...] = THRESHOLD_GRID,
    forward_null: bool = False,
    backward_null: bool = False,
) -> list[tuple[str, list[set[tuple[int, int]]], str]]:
    """Links from both directions' probabilities combined cell by cell (:func:`~pyro_attention.aer.
    combine_posteriors`, each of :data:`~pyro_attention.aer.POSTERIOR_COMBINATIONS`), thresholded as
    :func:`threshold_links` does: each half of the pairs with the threshold best on the other half.

    :param forward: per pair the forward model's ``(T, S)`` matrices (``(T, 1 + S)`` with ``forward_null``: column
        0 the NULL word, dropped here); ``backward``: the reverse model's ``(S, T)`` (``(S, 1 + T)``).
    :returns: ``(method, links, note)`` per combination, links as ``(source, target)`` of the corpus.
    """
    if len(forward) != len(backward):
        raise ValueError(f"combined_links: {len(forward)} forward and {len(backward)} reverse alignments")
    fwd = [p[:, int(forward_null):] for p in forward]
    bwd = [p[:, int(backward_null):] for p in backward]
    out = []
    for method in POSTERIOR_COMBINATIONS:
        matrices = [combine_posteriors(f, b, method) for f, b in zip(fwd, bwd, strict=True)]
        links, chosen = threshold_links(matrices, gold, grid)
        out.append((method, links, f"thresholds {chosen[0]:g} / {chosen[1]:g} (even / odd pairs, each tuned on the "
                                   "other half)"))
    return out


def pyro_latent(model: str) -> str:
    """The ``latent`` kind of pair ``model`` (``"none"`` for deterministic attention)."""
    from pyro_attention.registry import ALL_PAIRS

    return ALL_PAIRS[model].latent


def format_rows(rows: list[AlignRow]) -> str:
    lines = ["| model | alignment source | direction | AER | precision | recall | links |", "|" + "---|" * 7]
    for r in rows:
        a = r.result
        lines.append(
            f"| {r.model} | {r.source} | {r.direction} | {a.aer:.3f} | {a.precision:.3f} | {a.recall:.3f} "
            f"| {a.num_predicted} |"
        )
    return "\n".join(lines)


#: the ``symmetrisation`` values written to the JSON results
JSON_SYMMETRISATIONS = ("forward", "reverse", "intersection", "union", "grow-diag", "grow-diag-final",
                        *POSTERIOR_COMBINATIONS)


def json_rows(rows: list[AlignRow], corpus: str) -> list[dict[str, Any]]:
    """Rows for ``docs/results/aer.json``: ``corpus``, ``model`` (``<network>-<pair>``), ``output``, ``source``,
    ``symmetrisation``, ``aer`` / ``precision`` / ``recall`` in %, ``train_sentences``, ``wall_s`` (training, both
    directions for a symmetrised row) and ``note``."""
    out = []
    for r in rows:
        if r.direction not in JSON_SYMMETRISATIONS:
            continue
        a = r.result
        out.append({
            "corpus": corpus, "model": f"{r.network}-{r.model}", "output": r.output,
            "source": "soft" if r.source == "weights" else r.source, "symmetrisation": r.direction,
            "aer": round(100 * a.aer, 2), "precision": round(100 * a.precision, 2),
            "recall": round(100 * a.recall, 2), "train_sentences": r.train_sentences, "wall_s": round(r.wall_s, 1),
            "note": r.note,
        })
    return out
