"""The documentation site builds without a warning (``sphinx-build -W``): every page parses, every docstring's reST
is well formed, and every tutorial notebook (docs/tutorials/*.md) runs cell by cell.  Needs the ``docs`` extra
(``pip install -e ".[docs]"``)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.paths import REPO


def test_the_docs_build_without_warnings(tmp_path):
    pytest.importorskip("sphinx", reason="the docs extra is not installed (pip install -e '.[docs]')")
    pytest.importorskip("myst_nb", reason="the docs extra is not installed (pip install -e '.[docs]')")
    done = subprocess.run([sys.executable, "-m", "sphinx", "-W", "-q", "-b", "html", str(REPO / "docs"),
                           str(tmp_path / "html")], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "html" / "api.html").is_file() and (tmp_path / "html" / "index.html").is_file()
    assert "argmax is the gold region" in (tmp_path / "html" / "tutorials" / "region-qa.html").read_text(encoding="utf-8")


def test_the_cli_reference_lists_every_command_and_flag():
    """docs/cli.md (``python -m pyro_attention.cli.reference > docs/cli.md``) has a section for every command with
    every one of its flags: regenerate it when a flag changes.  (Flags, not the text: argparse lays help out
    differently from one Python version to the next.)"""
    import re

    from pyro_attention.cli.main import make_parser
    from pyro_attention.cli.reference import commands

    page = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    sections = dict(re.findall(r"^## `([^`]+)`\n\n```text\n(.*?)```", page, re.M | re.S))
    for name, parser in commands(make_parser(), "pyro-attention"):
        assert name in sections, f"docs/cli.md has no section for {name!r}: regenerate it"
        flags = {o for a in parser._actions for o in a.option_strings}
        missing = sorted(f for f in flags if f not in sections[name])
        assert not missing, f"docs/cli.md's {name!r} lacks {missing}: regenerate it"


def test_the_custom_network_page_runs(capsys):
    """docs/custom-network.md's block (the extension point: a task network of one's own) runs as printed: every pair
    trains on the new network unchanged and the marginal pair's likelihood is exact."""
    import re

    page = (REPO / "docs" / "custom-network.md").read_text(encoding="utf-8")
    (code,) = re.findall(r"```python\n(.*?)```", page, re.S)
    exec(compile(code, "docs/custom-network.md", "exec"), {"__name__": "custom_network"})
    printed = capsys.readouterr().out
    assert "MarginalLikelihood" in printed and "(enumeration)" in printed and "attended word of each label" in printed
