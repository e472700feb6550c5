"""Where the corpora live: the data directory (:func:`data_dir`, ``$PYRO_ATTENTION_DATA``), the files of a
Multi30k or IWSLT14 split, and a file that must exist (:func:`require_file`).  Names re-exported by
:mod:`pyro_attention.data.text`."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

DATA_ENV = "PYRO_ATTENTION_DATA"
MULTI30K_SPLITS = ("train", "val", "test_2016_flickr", "test_2017_flickr", "test_2017_mscoco", "test_2018_flickr")
MULTI30K_LANGUAGES = ("de", "en", "fr", "cs")
IWSLT14_SPLITS = ("valid", "test")
IWSLT14_LANGUAGES = ("de", "en")


def data_dir(arg: str | os.PathLike | None = None, option: str = "--data-dir") -> Path:
    """The data directory: ``arg`` if given, else the ``PYRO_ATTENTION_DATA`` environment variable.

    :param option: the command-line option to name in the error message.
    :raises FileNotFoundError: if neither is set, or the directory does not exist.
    """
    if arg is not None and str(arg) != "":
        path, source = Path(arg).expanduser(), f"{option} {arg}"
    elif os.environ.get(DATA_ENV):
        path, source = Path(os.environ[DATA_ENV]).expanduser(), f"{DATA_ENV}={os.environ[DATA_ENV]}"
    else:
        raise FileNotFoundError(
            f"no data directory given: pass {option} PATH or set the {DATA_ENV} environment variable "
            f"(the folder holding multi30k/, iwslt14-de-en/, ...)"
        )
    if not path.is_dir():
        raise FileNotFoundError(f"data directory {path} (from {source}) does not exist or is not a directory")
    return path


def _corpus_dir(root: str | os.PathLike, name: str, marker: str) -> Path:
    """``root/name`` if it exists, else ``root`` itself when it already is that folder (holds ``marker``)."""
    root = Path(root)
    if (root / name).is_dir():
        return root / name
    if (root / marker).exists() or root.name == name:
        return root
    raise FileNotFoundError(f"{root / name}: no such directory (expected the {name} corpus under {root})")


def require_file(path: str | os.PathLike, what: str = "file") -> Path:
    """``path`` as a ``Path`` if it is a file; else ``FileNotFoundError`` saying whether it is missing or a folder."""
    path = Path(path)
    if path.is_dir():
        raise FileNotFoundError(f"{path}: is a directory, not {'an' if what[0] in 'aeiou' else 'a'} {what}")
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such {what}")
    return path


def _check_split(
    corpus: str, split: str, splits: Sequence[str], languages: tuple[str, str], allowed: Sequence[str]
) -> None:
    """``split`` one of ``splits``, both ``languages`` of ``allowed`` and different; else a ``ValueError``."""
    if split not in splits:
        raise ValueError(f"unknown {corpus} split {split!r}; allowed: {', '.join(splits)}")
    for lang in languages:
        if lang not in allowed:
            raise ValueError(f"unknown {corpus} language {lang!r}; allowed: {', '.join(allowed)}")
    if languages[0] == languages[1]:
        raise ValueError(f"source and target language are both {languages[0]!r}")


def multi30k_paths(
    data_dir: str | os.PathLike, split: str, src: str = "de", tgt: str = "en", tokenized: bool = True
) -> tuple[Path, Path]:
    """Source and target files of a Multi30k split.

    :param data_dir: the data directory (holding ``multi30k/``) or the ``multi30k`` folder itself.
    :param tokenized: the lower-cased Moses-tokenised ``tok/{split}.lc.norm.tok.{lang}.gz`` (True) or the cased
        untokenised ``raw/{split}.{lang}.gz`` (False; use these as sacreBLEU references).
    :raises ValueError: for an unknown split or language (listing the allowed ones).
    :raises FileNotFoundError: naming a missing file (e.g. Czech has no 2017 test sets).
    """
    _check_split("Multi30k", split, MULTI30K_SPLITS, (src, tgt), MULTI30K_LANGUAGES)
    root = _corpus_dir(data_dir, "multi30k", "tok")
    if tokenized:
        paths = tuple(root / "tok" / f"{split}.lc.norm.tok.{lang}.gz" for lang in (src, tgt))
    else:
        paths = tuple(root / "raw" / f"{split}.{lang}.gz" for lang in (src, tgt))
    return require_file(paths[0]), require_file(paths[1])


def iwslt14_paths(
    data_dir: str | os.PathLike, split: str, bpe: bool = False, src: str = "de", tgt: str = "en"
) -> tuple[Path, Path]:
    """Source and target files of an IWSLT14 De-En split (``valid`` or ``test``; there is no train split here).

    :param data_dir: the data directory (holding ``iwslt14-de-en/``) or that folder itself.
    :param bpe: the 14k joint BPE files ``{split}.{lang}.bpe.gz`` (``@@ `` joiner; see :func:`undo_bpe`) instead
        of the word-tokenised ``{split}.{lang}.gz``.
    """
    _check_split("IWSLT14", split, IWSLT14_SPLITS, (src, tgt), IWSLT14_LANGUAGES)
    root = _corpus_dir(data_dir, "iwslt14-de-en", "valid.de.gz")
    suffix = ".bpe.gz" if bpe else ".gz"
    return require_file(root / f"{split}.{src}{suffix}"), require_file(root / f"{split}.{tgt}{suffix}")
