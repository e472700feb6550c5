"""Sphinx configuration: ``pip install -e ".[docs]"`` then ``sphinx-build -W -b html docs docs/_build/html``."""

project = "pyro-attention"
author = "pyro-attention developers"
extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.viewcode"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "results"]
myst_heading_anchors = 4
myst_enable_extensions = ["dollarmath"]
autodoc_member_order = "bysource"
autodoc_typehints = "description"
html_theme = "alabaster"
