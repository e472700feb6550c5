"""Writing output files (checkpoints, CSV, JSON, text, figures): a failure is one error naming the file and the cause.

A read-only folder, a full disk or a missing permission surfaced as a bare ``OSError`` from deep inside a writer,
or as torch's ``RuntimeError: [enforce fail at inline_container.cc:...] unexpected pos ...`` from ``torch.save``.
Every writer of the package runs inside :func:`writing`, which turns both into a :class:`WriteError`:
``cannot write /x/last.pt: Read-only file system (errno 30)``.  The command line prints it as one ``error:``
line with exit status 1.  Writes that replace a file (checkpoints, ``history.csv``, :func:`write_text`) go to a
temporary file in the same folder that is renamed over the old one, so a failed write leaves the previous file
as it was.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["WriteError", "write_error", "write_text", "writing"]

#: the start of torch's message when its zip writer fails (it keeps no errno)
_TORCH_WRITER = re.compile(r"inline_container|PytorchStreamWriter|file write failed|unexpected pos")


class WriteError(OSError):
    """Writing ``filename`` failed; ``str(error)`` is ``"cannot write PATH: CAUSE (errno N)"``."""

    def __init__(self, path: str | os.PathLike, cause: str, errno: int | None = None) -> None:
        super().__init__(f"cannot write {path}: {cause}" + (f" (errno {errno})" if errno is not None else ""))
        self.errno, self.filename, self.cause = errno, str(path), cause

    def __str__(self) -> str:  # OSError's own would print "[Errno N] None: 'PATH'" once errno and filename are set
        return str(self.args[0])

    def __reduce__(self) -> tuple:  # picklable (several processes pass errors around)
        return _rebuild, (str(self), self.filename, self.cause, self.errno)


def _rebuild(message: str, filename: str, cause: str, errno: int | None) -> WriteError:
    error = WriteError(filename, cause)
    error.args, error.errno = (message,), errno
    return error


def _free_space(path: Path) -> str:
    for folder in (path.parent, *path.parents):
        with contextlib.suppress(OSError):
            if folder.exists():
                free = shutil.disk_usage(folder).free
                return f"; {free / 2**20:.1f} MiB free on its disk" + (" (full)" if free < 2**20 else "")
    return ""


def write_error(path: str | os.PathLike, error: BaseException) -> WriteError:
    """The :class:`WriteError` for ``error`` (an ``OSError``, or torch's writer failing) while writing ``path``."""
    if isinstance(error, WriteError):
        return error
    if isinstance(error, OSError):
        cause = error.strerror or str(error) or type(error).__name__
        if error.errno in (errno.EEXIST, errno.ENOTDIR):  # a file where a folder of the path should be
            blocker = next((p for p in Path(path).parents if p.exists() and not p.is_dir()), None)
            if blocker is not None:
                blocked = WriteError(path, f"{cause} (errno {error.errno}): {blocker} is a file, not a folder")
                blocked.errno = error.errno
                return blocked
        return WriteError(path, cause, error.errno)
    first = (str(error).strip().splitlines() or [""])[0]
    first = re.sub(r"^\[enforce fail at [^\]]*\]\s*\.?\s*", "", first)
    return WriteError(path, f"torch could not write it ({first or type(error).__name__}){_free_space(Path(path))}")


@contextlib.contextmanager
def writing(path: str | os.PathLike) -> Iterator[None]:
    """Turn an ``OSError`` (or torch's zip writer failing) inside the block into a :class:`WriteError` on ``path``."""
    try:
        yield
    except WriteError:
        raise
    except OSError as e:
        raise write_error(path, e) from None
    except RuntimeError as e:
        if _TORCH_WRITER.search(str(e)):
            raise write_error(path, e) from None
        raise


def write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically: a temporary file in the same folder, then a rename; on failure a
    :class:`WriteError` naming ``path``, and an existing ``path`` is left as it was."""
    path = Path(path)
    if path.is_char_device():  # /dev/stdout, /dev/null: not replaceable by a rename
        with writing(path), open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return path
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o666 & ~_umask())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    return path


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
