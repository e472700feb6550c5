"""The documentation site builds without a warning (``sphinx-build -W``): every page parses, every docstring's reST
is well formed, and every tutorial notebook (docs/tutorials/*.md) runs cell by cell.  The build needs the ``docs``
extra (``pip install -e ".[docs]"``); the notebooks' own tests run their code cells without it."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO


def test_the_docs_build_without_warnings(tmp_path):
    """Skips without the docs extra, except under ``CI=true``, where the README's test command installs it."""
    for module in ("sphinx", "myst_nb"):
        if os.environ.get("CI") == "true":
            importlib.import_module(module)  # CI builds the docs: a missing extra fails here
        pytest.importorskip(module, reason="the docs extra is not installed (pip install -e '.[docs]')")
    done = subprocess.run([sys.executable, "-m", "sphinx", "-W", "-q", "-b", "html", str(REPO / "docs"),
                           str(tmp_path / "html")], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "html" / "api.html").is_file() and (tmp_path / "html" / "index.html").is_file()
    tutorials = tmp_path / "html" / "tutorials"
    assert "argmax is the gold region" in (tutorials / "region-qa.html").read_text(encoding="utf-8")
    assert "attended word of each label" in (tutorials / "custom-network.html").read_text(encoding="utf-8")
    assert "difference 0.140" in (tutorials / "three-examples.html").read_text(encoding="utf-8")


def test_the_cli_reference_lists_every_command_and_flag():
    """docs/cli.md (``python -m pyro_attention.cli.reference > docs/cli.md``) has a section for every command with
    every one of its flags: regenerate it when a flag changes.  (Flags, not the text: argparse lays help out
    differently from one Python version to the next.)"""
    from pyro_attention.cli.main import make_parser
    from pyro_attention.cli.reference import commands

    page = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    sections = dict(re.findall(r"^## `([^`]+)`\n\n```text\n(.*?)```", page, re.M | re.S))
    for name, parser in commands(make_parser(), "pyro-attention"):
        assert name in sections, f"docs/cli.md has no section for {name!r}: regenerate it"
        flags = {o for a in parser._actions for o in a.option_strings}
        missing = sorted(f for f in flags if f not in sections[name])
        assert not missing, f"docs/cli.md's {name!r} lacks {missing}: regenerate it"


def notebook_cells(page: Path) -> list[str]:
    """The code cells (```` ```{code-cell} ipython3 ```` blocks) of a MyST notebook, in order."""
    return re.findall(r"^```\{code-cell\} ipython3\n(.*?)^```", page.read_text(encoding="utf-8"), re.S | re.M)


def run_notebook(name: str) -> str:
    """Run the code cells of docs/tutorials/``name`` in order, in one fresh Python process started in the page's
    folder (as the docs build runs them, without the docs extra), and return what they printed."""
    page = REPO / "docs" / "tutorials" / name
    cells = notebook_cells(page)
    assert cells, f"{page} has no code cells"
    done = subprocess.run([sys.executable, "-c", "\n\n".join(cells)], cwd=page.parent, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_custom_network_notebook_runs():
    """docs/tutorials/custom-network.md (the extension point: a task network of one's own) runs cell by cell: every
    pair trains on the new network unchanged, the marginal pair's likelihood is exact and compare ranks them all."""
    printed = run_notebook("custom-network.md")
    assert "MarginalLikelihood" in printed and "(enumeration)" in printed and "attended word of each label" in printed
    assert "| rank | pair |" in printed
    names = ("soft", "marginal", "hard (enum)", "variational (enum)", "relaxed")
    assert all(f"| {name} |" in printed for name in names)


def test_the_three_examples_notebook_runs():
    """docs/tutorials/three-examples.md runs cell by cell, its numerical checks (asserted in the cells) passing: the
    standard library, Pyro and the package agree on every example."""
    printed = run_notebook("three-examples.md")
    assert "f(E[z]) = 0.881, E[f(z)] = 0.741, difference 0.140" in printed
    assert printed.count("KL(q || p(z | x, y))") == 2  # the package's check, before and after fit
