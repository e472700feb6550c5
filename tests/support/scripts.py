"""Load a script of ``examples/`` or ``benchmarks/`` (not packages) as a module, for the tests that run them."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from tests.support.paths import REPO

ROOT = REPO


def load_script(folder: str, name: str) -> ModuleType:
    """Import ``ROOT/folder/name.py`` under a private module name (registered in ``sys.modules``)."""
    path = ROOT / folder / f"{name}.py"
    module_name = f"_pyro_attention_{folder.replace('/', '_')}_{name}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module
