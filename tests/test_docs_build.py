"""The documentation site builds without a warning (``sphinx-build -W``): every page parses, every link into the API
resolves, every docstring's reST is well formed.  Needs the ``docs`` extra (``pip install -e ".[docs]"``)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.paths import REPO


def test_the_docs_build_without_warnings(tmp_path):
    pytest.importorskip("sphinx", reason="the docs extra is not installed (pip install -e '.[docs]')")
    pytest.importorskip("myst_parser", reason="the docs extra is not installed (pip install -e '.[docs]')")
    done = subprocess.run([sys.executable, "-m", "sphinx", "-W", "-q", "-b", "html", str(REPO / "docs"),
                           str(tmp_path / "html")], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "html" / "api.html").is_file() and (tmp_path / "html" / "index.html").is_file()
