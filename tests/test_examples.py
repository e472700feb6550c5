"""Every example and ``pyro-attention demo`` run with tiny arguments (as Pyro's tests/test_examples.py)."""

from __future__ import annotations

import math
import re
import subprocess
import sys

import pytest

from pyro_attention import cli
from tests.support.paths import REPO, SHARED_DATA
from tests.support.scripts import load_script

EXAMPLES = REPO / "examples"
TESTED = {
    "toy_expectation.py",
    "exact_vs_variational.py",
    "region_qa.py",
    "inspect_posteriors.py",
    "translate.py",
    "clevr_qa.py",
}
CLEVR = SHARED_DATA


def _load(name: str):
    return load_script("examples", name)


def test_every_example_is_tested():
    assert {p.name for p in EXAMPLES.glob("*.py")} == TESTED


def test_region_qa_tiny(capsys, tmp_path):
    module = _load("region_qa")
    out = tmp_path / "table.md"
    args = "--train-size 64 --val-size 16 --hidden 8 --epochs 1 --batch-size 16 --warmup-steps 2 --quiet".split()
    rows = module.main(module.make_parser().parse_args([*args, "--markdown", str(out)]))
    assert list(rows) == [
        "soft",
        "marginal",
        "hard (enum)",
        "hard (sample)",
        "variational (enum)",
        "variational (sample)",
        "relaxed",
        "segmentation",
        "syntactic",
        "segmentation-marginal",
        "gaussian (kl_scale=0.01)",
        "bayesian (guide_scores=prior, kl_scale=0.01)",
        "gumbel (categorical)",
        "rws",
    ]
    assert all(math.isfinite(r.nll) and 0 <= r.accuracy <= 1 for r in rows.values())
    # every pair reports its prior; the exact posterior where the maths allows, q where the guide has weights
    assert {k for k, r in rows.items() if "posterior" in r.entropy} == {
        "marginal", "hard (enum)", "hard (sample)", "variational (enum)", "variational (sample)",
        "segmentation-marginal", "gumbel (categorical)", "rws",
    }
    assert "guide" not in rows["gaussian (kl_scale=0.01)"].entropy and "guide" in rows["rws"].entropy
    printed = capsys.readouterr().out
    assert "| pair | NLL | accuracy | H(prior) | H(posterior) | H(q) | gold@prior" in printed
    assert re.search(r"\| relaxed \| ~[0-9.]+ ± [0-9.]+", printed)  # an estimate, with its Monte Carlo error
    assert out.read_text().startswith("| pair |")
    assert all(r.nll > 0 for r in rows.values())


def test_region_qa_compare_tiny(capsys):
    module = _load("region_qa")
    args = "--train-size 64 --val-size 16 --hidden 8 --epochs 1 --batch-size 16 --quiet --compare".split()
    module.main(module.make_parser().parse_args([*args, "--pairs", "soft", "marginal", "relaxed"]))
    printed = capsys.readouterr().out
    assert "held-out log predictive density per answer (16 scenes):" in printed
    assert "| rank | pair | elpd / token | se | elpd_diff | dse |" in printed
    assert re.search(r"\| relaxed \| ~-[0-9.]+ ± [0-9.]+", printed)


@pytest.mark.skipif(not (CLEVR / "clevr-scenes").is_dir(), reason=f"CLEVR scenes not found under {CLEVR}")
def test_clevr_qa_tiny(capsys, tmp_path):
    module = _load("clevr_qa")
    out = tmp_path / "clevr.md"
    args = ["--data-dir", str(CLEVR), "--generated-train", "16", "--generated-val", "16", "--hidden", "8"]
    args += ["--epochs", "1", "--batch-size", "64", "--quiet", "--markdown", str(out)]
    pairs = ["soft", "variational (sample)", "relaxed", "bayesian (guide_scores=prior, kl_scale=0.01)", "rws"]
    result = module.main(module.make_parser().parse_args([*args, "--pairs", *pairs]))
    assert [r.name for r in result.generated] == pairs
    printed = capsys.readouterr().out
    assert "Original CLEVR validation questions (275" in printed and "Generated validation questions (16" in printed
    assert "| relaxed | ~" in printed and "| marginal | 1.69 | 60.33 |" in printed
    assert out.read_text().startswith("Original CLEVR")


def test_clevr_qa_missing_data(tmp_path):
    module = _load("clevr_qa")
    with pytest.raises(SystemExit, match="no CLEVR scenes under"):
        module.main(module.make_parser().parse_args(["--data-dir", str(tmp_path), "--quiet"]))


def test_inspect_posteriors_tiny(capsys, tmp_path):
    module = _load("inspect_posteriors")
    out = tmp_path / "posterior.nc"
    args = "--train-size 32 --val-size 8 --hidden 8 --epochs 1 --num-samples 12 --nuts 1 --nuts-samples 20".split()
    result = module.main(module.make_parser().parse_args([*args, "--out", str(out)]))
    printed = capsys.readouterr().out
    assert "| pair | log_p_per_token | elbo_gap_per_token" in printed
    assert out.exists() and out.with_suffix(".forest.png").exists()
    assert "| example | regions | max R-hat |" in printed and len(result["nuts"]) == 1
    assert set(result["rows"]) == {"marginal", "hard (enum)", "variational (enum)", "variational (sample)", "relaxed"}


def test_translate_tiny(capsys, tmp_path):
    module = _load("translate")
    md = tmp_path / "table.md"
    args = "--train-size 40 --val-size 8 --test-size 4 --epochs 1 --embedding 8 --encoder 8 --decoder 8".split()
    args += ["--attention", "8", "--beam", "2", "--quiet", "--out", str(tmp_path / "runs"), "--markdown", str(md)]
    results = module.main(module.make_parser().parse_args(args))
    assert len(results) == 14 and results["relaxed"].scores.ppl_exact is False
    assert results["segmentation-marginal"].scores.ppl_exact is True
    assert results["gaussian (kl_scale=0.01)"].scores.bleu >= 0
    printed = capsys.readouterr().out
    assert "| relaxed | ~" in printed and "BLEU signature: nrefs:1" in printed
    assert md.read_text().startswith("| pair | PPL | BLEU | prior entropy |")


def test_region_qa_rejects_unknown_pair():
    module = _load("region_qa")
    with pytest.raises(SystemExit, match="--pairs: unknown"):
        module.main(module.make_parser().parse_args(["--pairs", "sof"]))


def test_demo_tiny(capsys, tmp_path):
    args = "demo --train-size 64 --val-size 16 --hidden 8 --epochs 1 --num-plots 2 --quiet".split()
    code = cli.main([*args, "--out", str(tmp_path)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "| variational (enum) |" in printed
    png = tmp_path / "alignments.png"
    assert png.exists() and png.read_bytes()[:4] == b"\x89PNG"
    assert str(png.resolve()) in printed


def test_console_script_help():
    out = subprocess.run([sys.executable, "-m", "pyro_attention.cli", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "demo" in out.stdout


SEED = {"jensen_gap.py": [], "average_then_predict.py": ["--sharpness", "3"],
          "posterior_and_elbo.py": ["--steps", "200"]}


@pytest.mark.parametrize("name", sorted(SEED))
def test_seed_examples_run_on_python_3_9_with_nothing_installed(name):
    """The three standalone examples parse as Python 3.9 and run with no site-packages at all (``python -S -I``),
    their numerical checks passing."""
    import ast

    path = EXAMPLES / "seed" / name
    ast.parse(path.read_text(encoding="utf-8"), feature_version=(3, 9))
    done = subprocess.run([sys.executable, "-S", "-I", str(path), *SEED[name]], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and done.stdout.rstrip().endswith("checks passed"), done.stdout + done.stderr


def test_every_seed_example_is_tested():
    assert {p.name for p in (EXAMPLES / "seed").glob("*.py")} == set(SEED)


def test_seed_examples_numbers():
    jensen = load_script("examples/seed", "jensen_gap")
    cases = jensen.main(jensen.make_parser().parse_args(["--p-zero", "0.2"]))
    soft, marginal = cases["sigmoid, z in {0, 4}, P(z = 0) = 0.2"]
    assert soft == pytest.approx(1 / (1 + math.exp(-3.2)))  # E[z] = 0.8 * 4
    assert marginal == pytest.approx(0.2 * 0.5 + 0.8 / (1 + math.exp(-4)))
    average = load_script("examples/seed", "average_then_predict")
    uniform = average.main(average.make_parser().parse_args(["--sharpness", "0"]))
    assert uniform["weights"] == pytest.approx([1 / 3] * 3)
    elbo = load_script("examples/seed", "posterior_and_elbo")
    out = elbo.main(elbo.make_parser().parse_args(["--steps", "300"]))
    assert out["q"] == pytest.approx(out["posterior"], abs=1e-5) and out["posterior"][1] == pytest.approx(0.18 / 0.35)


def test_the_readme_python_runs(capsys):
    """The README's Python block runs as printed (about 10 s) and shows the ArviZ summary of the posteriors."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    (code,) = re.findall(r"```python\n(.*?)```", readme, re.S)
    exec(compile(code, "README.md", "exec"), {"__name__": "readme"})
    assert "align_probs[" in capsys.readouterr().out
