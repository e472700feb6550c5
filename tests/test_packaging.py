"""The package as users get it: a wheel, installed (not editable) into a clean virtual environment away from the
source tree, imports its subpackages from that environment and runs its command; the version floors pyproject.toml
claims are the ones CI's floors leg installs; a deprecated call from the package fails the suite."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from tests.support.paths import REPO

ROOT = REPO
#: the packages the source tree holds (each folder with an __init__.py), as the wheel must name them
SOURCES = {"pyro_attention": ROOT / "pyro_attention", "pyro_attention/models": ROOT / "models",
           "pyro_attention/inference": ROOT / "inference"}


def _site_packages(prefix: Path) -> Path:
    lib = "Lib" if os.name == "nt" else f"lib/python{sys.version_info.major}.{sys.version_info.minor}"
    return prefix / lib / "site-packages"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # built from a copy: setuptools writes build/ and *.egg-info next to the sources it builds
    source = tmp_path_factory.mktemp("source") / "pyro-attention"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", ".ci-venv", "build", "*.egg-info", "__pycache__", ".pytest_cache", ".ruff_cache", "runs"))
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(out), str(source)],
        capture_output=True, text=True, timeout=600,
    )
    assert build.returncode == 0, build.stderr[-3000:]
    (path,) = out.glob("pyro_attention-*.whl")
    return path


def test_the_wheel_holds_every_module_and_nothing_else(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {
        f"{package}/{py.relative_to(folder).as_posix()}"
        for package, folder in SOURCES.items()
        for py in folder.rglob("*.py")
        if "__pycache__" not in py.parts
    }
    modules = {n for n in names if n.endswith(".py")}
    assert modules == expected, (sorted(expected - modules), sorted(modules - expected))
    assert not any(n.startswith(("tests/", "examples/", "benchmarks/", "docs/")) for n in names)
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "pyro-attention = pyro_attention.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


def test_the_wheel_installed_in_a_clean_environment_imports_and_runs(wheel, tmp_path):
    """Installed with ``--no-deps`` into a new venv; the dependencies (torch, Pyro, ArviZ, ...) are lent from the
    test environment by a path entry placed *after* the venv's own site-packages, without its ``.pth`` files, so
    an editable install of the source tree there cannot be what gets imported."""
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", str(wheel)],
        capture_output=True, text=True, timeout=300,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    lent = [p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()]
    (_site_packages(env_dir) / "zz_lent_dependencies.pth").write_text("\n".join(lent) + "\n")
    away = tmp_path / "elsewhere"  # not the source tree: nothing importable by the current directory
    away.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    probe = (
        "import pyro_attention, pyro_attention.models as m, pyro_attention.inference as i\n"
        "print(pyro_attention.__file__); print(m.__file__); print(i.__file__)\n"
        "print(m.VariationalAttention.__name__, i.to_inference_data.__name__)\n"
    )
    run = subprocess.run([str(python), "-c", probe], cwd=away, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    files = run.stdout.splitlines()[:3]
    site = _site_packages(env_dir).resolve()
    assert all(Path(f).resolve().is_relative_to(site) for f in files), files
    assert "VariationalAttention to_inference_data" in run.stdout
    script = env_dir / ("Scripts/pyro-attention.exe" if os.name == "nt" else "bin/pyro-attention")
    demo = subprocess.run([str(script), "demo", "--help"], cwd=away, env=env, capture_output=True, text=True,
                          timeout=300)
    assert demo.returncode == 0, demo.stderr[-3000:]
    assert "usage: pyro-attention demo" in demo.stdout


def _pyproject() -> dict:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_floors_are_what_the_floors_leg_installs():
    """Every floor of torch, pyro-ppl, arviz and numpy in pyproject.toml is the version .ci/run's floors leg pins,
    and requires-python's floor is that leg's Python: no claim a test leg has not run."""
    ci = (ROOT / ".ci" / "run").read_text()
    floors = dict(p.split("==") for p in re.search(r'^FLOORS="([^"]+)"', ci, re.M).group(1).split())
    requirements = {Requirement(r).name: Requirement(r) for r in _pyproject()["project"]["dependencies"]}
    for name, pinned in floors.items():
        (spec,) = requirements[name].specifier
        assert spec.operator == ">=" and Version(spec.version) == Version(pinned), (name, str(spec), pinned)
    assert set(floors) == {"torch", "pyro-ppl", "arviz", "numpy"}
    leg = re.search(r"floors\) cached_leg floors (\d+\.\d+) ", ci).group(1)
    (python,) = SpecifierSet(_pyproject()["project"]["requires-python"])
    assert python.operator == ">=" and python.version == leg


def test_readme_states_the_supported_pythons():
    readme = (ROOT / "README.md").read_text()
    classifiers = {c.rsplit(" ", 1)[-1] for c in _pyproject()["project"]["classifiers"] if "Python :: 3." in c}
    assert classifiers == {"3.10", "3.11", "3.12", "3.13"}
    assert "Supported: Python 3.10, 3.11, 3.12 and 3.13" in readme
    ci = (ROOT / ".ci" / "run").read_text()
    assert {f"cached_leg py{v.replace('.', '')} {v} " for v in ("3.12", "3.13")} <= {
        m.group(0) for m in re.finditer(r"cached_leg py\d+ 3\.\d+ ", ci)}


def test_a_deprecated_call_from_the_package_fails():
    """pyproject's filterwarnings turns DeprecationWarning / FutureWarning raised from the package's modules into
    errors (numpy, matplotlib, torch and ArviZ warn through the caller's frame); one from elsewhere stays a warning."""
    package = {"__name__": "pyro_attention.probe"}
    exec("import warnings\ndef old():\n    warnings.warn('deprecated', DeprecationWarning, stacklevel=1)", package)
    with pytest.raises(DeprecationWarning):
        package["old"]()
    other = {"__name__": "somebody_else"}
    exec("import warnings\ndef old():\n    warnings.warn('deprecated', DeprecationWarning, stacklevel=1)", other)
    with pytest.warns(DeprecationWarning):
        other["old"]()
