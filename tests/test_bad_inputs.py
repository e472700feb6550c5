"""The bad-input catalogue: every user mistake we know of, each committed once, each with a clear error.

One entry per mistake (:class:`tests.support.mistakes.Mistake`): an id, the category and a one-line description, a
zero-argument callable that commits the mistake through a public entry point, the exception type expected and a
regex the message must match.  The regex checks that the message *names the item*: the file and line, the tensor
and its shape or dtype, the option and the allowed values.  The error must be raised by this package (never from
deep inside torch or Pyro), and command-line mistakes must end in one ``error:`` line with exit status 1 or 2.

Each layer keeps its own catalogue beside its tests (:data:`LAYERS`); this module gathers them:
``docs/troubleshooting.md`` lists every entry (``test_every_mistake_is_documented`` keeps it from drifting), and
``python -m tests.test_bad_inputs`` prints its tables from a real run.
"""

from __future__ import annotations

import importlib
import re
import sys
import tempfile
from pathlib import Path

import torch

from tests.support.mistakes import WORK, Mistake, start_work
from tests.support.paths import REPO

DOC = REPO / "docs" / "troubleshooting.md"

#: the catalogue modules, from the data up to the command line
LAYERS = (
    "tests.data.test_bad_data_inputs",
    "tests.networks.test_bad_network_inputs",
    "tests.models.test_bad_model_inputs",
    "tests.inference.test_bad_inference_inputs",
    "tests.test_bad_report_inputs",
    "tests.tasks.translation.test_bad_translation_inputs",
    "tests.tasks.align.test_bad_align_inputs",
    "tests.cli.test_bad_cli_inputs",
)


def catalogue() -> list[Mistake]:
    """Every layer's entries, layer by layer."""
    return [m for name in LAYERS for m in importlib.import_module(name).CATALOGUE]


def test_catalogue_is_large_and_ids_are_unique():
    ids = [m.id for m in catalogue()]
    assert len(ids) >= 160
    assert len(set(ids)) == len(ids), [i for i in ids if ids.count(i) > 1]
    assert all(re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", i) for i in ids)


def test_every_catalogue_module_is_listed():
    found = {".".join(p.relative_to(REPO).with_suffix("").parts) for p in (REPO / "tests").rglob("test_bad_*.py")}
    assert found - {__name__} == set(LAYERS)


def test_every_mistake_is_documented():
    text = DOC.read_text(encoding="utf-8")
    missing = [m.id for m in catalogue() if f"`{m.id}`" not in text]
    assert not missing, f"add these catalogue entries to {DOC.relative_to(REPO)}: {missing}"


# ----------------------------------------------------------------------------------------------------------------
# ``python -m tests.test_bad_inputs``: the tables of docs/troubleshooting.md, messages from a real run


def _message(mistake: Mistake) -> str:
    try:
        mistake.commit()
    except BaseException as e:  # noqa: BLE001 - every entry raises
        text = re.split(r"\n\s*Trace Shapes:", str(e))[0]  # Pyro appends the trace's shapes
        text = " ".join(line.strip() for line in text.splitlines())
        text = text.replace(str(WORK[0]), "/path/to")
        if len(text) > 260:
            text = text[:257] + "..."
        return text.replace("|", "\\|")
    raise AssertionError(f"{mistake.id}: no error")


def _tables() -> str:
    entries = catalogue()
    out = []
    for category in dict.fromkeys(m.category for m in entries):
        out += [f"## {category}", "", "| id | mistake | error | fix |", "|---|---|---|---|"]
        for m in (m for m in entries if m.category == category):
            what, fix = m.what.replace("|", "\\|"), m.fix.replace("|", "\\|")
            out.append(f"| `{m.id}` | {what} | {m.error.__name__}: `{_message(m)}` | {fix} |")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        start_work(Path(tmp))
        sys.stdout.write(_tables())
