"""Subwords with HuggingFace ``tokenizers`` (optional): learn a BPE or unigram model on tokenised sentences and
segment with subword-nmt's ``@@`` joiner.  Names re-exported by :mod:`pyro_attention.data.text`."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from pyro_attention.data.translation import SPECIALS

if TYPE_CHECKING:  # an optional dependency
    from tokenizers import Tokenizer


def _import_tokenizers():
    try:
        import tokenizers
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(
            "subword segmentation needs the optional 'tokenizers' package: pip install tokenizers"
        ) from e
    return tokenizers


def train_subword(sentences: Iterable[Sequence[str] | str], vocab_size: int, model: str = "bpe") -> Tokenizer:
    """Learn a subword model on already tokenised sentences with HuggingFace ``tokenizers``.

    Words are the whitespace-separated tokens (``WhitespaceSplit`` pre-tokeniser: the existing tokenisation is
    kept, punctuation is not split again).  The specials ``<pad> <s> </s> <unk>`` come first in its vocabulary.

    :param sentences: token lists (or whitespace-separated strings).
    :param vocab_size: the subword vocabulary size (including specials and the base characters).
    :param model: ``"bpe"`` (byte-pair encoding) or ``"unigram"``.
    :returns: a ``tokenizers.Tokenizer``; segment with :func:`apply_subword`.
    """
    tk = _import_tokenizers()
    from tokenizers import models, pre_tokenizers, trainers

    if vocab_size < len(SPECIALS) + 1:
        raise ValueError(f"train_subword: vocab_size must exceed the {len(SPECIALS)} specials, got {vocab_size}")
    if model == "bpe":
        tokenizer = tk.Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True))
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIALS), show_progress=False)
    elif model == "unigram":
        tokenizer = tk.Tokenizer(models.Unigram())
        trainer = trainers.UnigramTrainer(
            vocab_size=vocab_size, special_tokens=list(SPECIALS), unk_token="<unk>", show_progress=False
        )
    else:
        raise ValueError(f"train_subword: unknown model {model!r}; allowed: 'bpe', 'unigram'")
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    text = (s if isinstance(s, str) else " ".join(s) for s in sentences)
    tokenizer.train_from_iterator(text, trainer=trainer)
    return tokenizer


def apply_subword(tokenizer: Tokenizer, sentence_tokens: Sequence[str]) -> list[str]:
    """Segment a tokenised sentence into subwords, marking every non-final piece of a word with ``@@``.

    The output follows the subword-nmt convention, so ``undo_bpe(" ".join(pieces)) == " ".join(sentence_tokens)``
    for words whose characters the model has seen (unseen characters become ``<unk>``).
    """
    _import_tokenizers()
    if isinstance(sentence_tokens, str):
        raise TypeError("apply_subword expects a list of tokens, not a string")
    if not sentence_tokens:
        return []
    enc = tokenizer.encode(list(sentence_tokens), is_pretokenized=True, add_special_tokens=False)
    words = enc.word_ids
    pieces: list[str] = []
    for k, (piece, word) in enumerate(zip(enc.tokens, words, strict=True)):
        last_of_word = k + 1 == len(words) or words[k + 1] != word
        pieces.append(piece if last_of_word else piece + "@@")
    return pieces
