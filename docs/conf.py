"""Sphinx configuration: ``pip install -e ".[docs]"`` then ``sphinx-build -W -b html docs docs/_build/html``."""

project = "pyro-attention"
author = "pyro-attention developers"
extensions = ["myst_nb", "sphinx.ext.autodoc", "sphinx.ext.viewcode"]
root_doc = "index"
exclude_patterns = ["_build", "results"]
myst_heading_anchors = 4
myst_enable_extensions = ["dollarmath"]
autodoc_member_order = "bysource"
autodoc_typehints = "description"
html_theme = "alabaster"
# notebooks (docs/tutorials/*.md) run at every build: building the docs is their test
nb_execution_mode = "force"
nb_execution_raise_on_error = True
nb_execution_timeout = 600
