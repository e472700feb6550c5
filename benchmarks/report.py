"""The tables and figures of ``benchmarks/run.py``: markdown blocks written into docs/performance.md and the
curves' figures."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/ is not a package
from step_time import PAIRS  # noqa: E402
from workloads import KMAX, OUTPUT_PAIRS  # noqa: E402


def outputs_markdown(result: dict[str, Any]) -> str:
    """The markdown block of the output-layer section."""
    m = result["machine"]
    lines = [
        f"Device `{m['device']}`; torch {m['torch']}, pyro-ppl {m['pyro']}, Python {m['python']}; "
        f"{m['processor']}.  Written by `{result['command']}` in {result['seconds']:.0f} s.",
        "",
        f"**{'Transformer' if result['mode'] == 'transformer' else 'Output layers'}**: Pyro SVI step (as the "
        "trainers take it) of every pair on the paper's `tanh` layer and "
        "on the product of experts (`product`); `/soft`: over the soft step *of the same layer*, in the same "
        "interleaved run (median of the repeats); memory: peak tensor bytes of one step "
        f"({result['memory_method']}).",
        "",
        "| size | threads | pair | tanh [s] | tanh /soft | tanh mem | product [s] | product /soft | product mem | "
        "product / tanh |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["outputs"].values():
        t, mem, spec = r["times"], r["memory"], r["spec"]
        network = (f"Transformer d={spec['d']}, {spec['heads']} heads, {spec['layers']} layers" if "heads" in spec
                   else f"H={spec['dec']}")
        label = (f"{r['size']} (B={spec['B']}, S={spec['S']}, T={spec['T']}, V={spec['Vs']:,}/{spec['V']:,}, "
                 f"{network}, dropout {spec['dropout']}, {r['repeats']} repeats)")
        for name in OUTPUT_PAIRS:
            a, b = t[f"tanh/{name}"], t[f"product/{name}"]
            lines.append(
                f"| {label} | {r['threads']} | {name} | {a:.3f} | {a / t['tanh/soft']:.2f} | "
                f"{_mem(mem[f'tanh/{name}'])} | {b:.3f} | {b / t['product/soft']:.2f} | "
                f"{_mem(mem[f'product/{name}'])} | {b / a:.2f} |"
            )
    return "\n".join(lines)


# -- reporting ---------------------------------------------------------------------------------------------------
def _mem(nbytes: float) -> str:
    if nbytes < 10 * 2**20:
        return f"{nbytes / 2**20:.1f} MiB"
    return f"{nbytes / 2**20:,.0f} MiB" if nbytes < 2**30 else f"{nbytes / 2**30:.2f} GiB"


def size_label(name: str, spec: dict[str, Any]) -> str:
    if spec["task"] == "qa":
        return f"{name} (B={spec['B']}, S={spec['S']}, D={spec['D']}, A={spec['A']})"
    return f"{name} (B={spec['B']}, S={spec['S']}, T={spec['T']}, D={spec['D']}, V={spec['V']})"


def markdown(result: dict[str, Any]) -> str:
    """The markdown block for ``docs/performance.md``."""
    m = result["machine"]
    limit = result["matmul_limit"]
    shaped = list(result["matmul"].values())[-1]
    lines = [
        f"Mode `{result['mode']}`; device `{m['device']}`; {m['threads']} torch thread(s); torch {m['torch']}, "
        f"pyro-ppl {m['pyro']}, Python {m['python']}; {m['processor']}.  Written by `{result['command']}` in "
        f"{result['seconds']:.0f} s.",
        "",
        "`torch.mm` (float32): "
        + ", ".join(f"{k}: {v / 1e9:.1f} GFLOP/s" for k, v in result["matmul"].items())
        + f"; the limit used below is {limit / 1e9:.1f} GFLOP/s (in brackets: against the last, output-layer-shaped"
        " rate).",
        "",
        f"**SVI step time** (median of {result['repeats']} interleaved steps; large: {result['large_repeats']}) and "
        f"peak memory of one step ({result['memory_method']}).  `pyro/torch`: the Pyro pair over the hand-written "
        "torch step of the same loss and gradients (target <= 1.05 at small and mid).  `/soft`: over Pyro soft "
        "attention at the same size (target for the sampled pairs <= 1.5).  `matmul`: FLOPs of the output layer's "
        "H x V product over all S positions (forward + backward, 3 x 2 S B T H V) per second of the whole step, as "
        "a fraction of the `torch.mm` limit.",
        "",
        "| size | pair | pyro [s] | torch [s] | pyro/torch | /soft | pyro mem | torch mem | matmul |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["steps"].values():
        t, mem = r["times"], r["memory"]
        soft = t.get("pyro/soft", math.nan)
        flops = 3 * r["output_flops"]
        for name in [n for n in PAIRS if f"pyro/{n}" in t]:
            p, h = t[f"pyro/{name}"], t[f"torch/{name}"]
            enum = name in ("marginal", "hard-enum", "va-enum")
            eff = f"{flops / p / limit:.0%} ({flops / p / shaped:.0%})" if enum else ""
            lines.append(
                f"| {r['label']} | {name} | {p:.4f} | {h:.4f} | {p / h:.2f} | {p / soft:.2f} | "
                f"{_mem(mem[f'pyro/{name}'])} | {_mem(mem[f'torch/{name}'])} | {eff} |"
            )
        key = "torch-straightforward/marginal"
        if key in t:
            lines.append(
                f"| {r['label']} | marginal, straightforward torch (all S*B*T*V logits) | | {t[key]:.4f} | | | | "
                f"{_mem(mem[key])} | {flops / t[key] / limit:.0%} ({flops / t[key] / shaped:.0%}) |"
            )
    lines += ["", "Fairness checks (Pyro validation on; relative errors of loss and gradients vs hand-written):", ""]
    for r in result["steps"].values():
        if r["checks"]:
            worst_l = max((c.get("loss_rel_err", 0.0) for c in r["checks"].values()), default=0.0)
            worst_g = max(c["grad_rel_err"] for c in r["checks"].values())
            ok = all(c["passed"] for c in r["checks"].values())
            verdict = "passed" if ok else "FAILED"
            lines.append(f"- {r['label']}: worst loss {worst_l:.1e}, worst gradient {worst_g:.1e}, {verdict}")
        else:
            lines.append(f"- {r['label']}: not checked in this mode (`--full` checks mid; large is too slow to check)")
    if result.get("throughput"):
        lines += ["", "**Evaluation throughput** (target tokens/s, no gradients, median):", ""]
        lines += ["| size | exact log p(y \\| x) | K-max (K=5) | exact mem | K-max mem |", "|---|---|---|---|---|"]
        for r in result["throughput"].values():
            e, k = r["exact"], r[f"K-max (K={KMAX})"]
            lines.append(
                f"| {r['label']} | {e['tokens_per_s']:,.0f} | {k['tokens_per_s']:,.0f} | {_mem(e['memory'])} | "
                f"{_mem(k['memory'])} |"
            )
    curves = result.get("curves")
    if curves:
        spec = curves["spec"]
        names = list(curves["rows"][0]["times"])
        lines += [
            "",
            f"**Against S** (translation B={spec['B']}, T={spec['T']}, D={spec['D']}, V={spec['V']}; Pyro steps; "
            "time [s] / peak memory):",
            "",
            "| S | " + " | ".join(names) + " |",
            "|---|" + "---|" * len(names),
        ]
        for row in curves["rows"]:
            cells = [f"{row['times'][n]:.3f} / {_mem(row['memory'][n])}" for n in names]
            lines.append(f"| {row['S']} | " + " | ".join(cells) + " |")
    if result.get("plots"):
        lines += ["", " ".join(f"![{Path(p).stem}]({p})" for p in result["plots"])]
    return "\n".join(lines)


def write_markdown(path: Path, mode: str, block: str) -> None:
    """Replace the ``mode`` block of ``path`` (created with a heading if missing), keeping everything else."""
    begin, end = f"<!-- benchmark:{mode}:begin -->", f"<!-- benchmark:{mode}:end -->"
    text = path.read_text() if path.exists() else "# Performance\n"
    new = f"{begin}\n{block}\n{end}"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + new + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + f"\n\n## Measured: `{mode}`\n\n{new}\n"
    path.write_text(text)


def plot(result: dict[str, Any], folder: Path, mode: str, relative_to: Path) -> list[str]:
    """Step time and memory against S; written as PNGs, returned as paths relative to the markdown file."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = result.get("curves")
    if not curves:
        return []
    folder.mkdir(parents=True, exist_ok=True)
    S = [r["S"] for r in curves["rows"]]
    names = list(curves["rows"][0]["times"])
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for name in names:
        axes[0].plot(S, [r["times"][name] for r in curves["rows"]], marker="o", label=name)
        axes[1].plot(S, [r["memory"][name] / 2**20 for r in curves["rows"]], marker="o", label=name)
    for ax, ylabel in zip(axes, ["seconds per step / evaluation", "peak memory [MiB]"], strict=True):
        ax.set_xlabel("source length S")
        ax.set_ylabel(ylabel)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=8)
    spec = curves["spec"]
    fig.suptitle(f"Pyro steps against S (B={spec['B']}, T={spec['T']}, D={spec['D']}, V={spec['V']})")
    fig.tight_layout()
    path = folder / f"{mode}-curves.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    paths = [path]
    fig, ax = plt.subplots(figsize=(9, 4))
    labels, ratios = [], []
    for size, r in result["steps"].items():
        for name in [n for n in PAIRS if f"pyro/{n}" in r["times"]]:
            labels.append(f"{size}\n{name}")
            ratios.append(r["times"][f"pyro/{name}"] / r["times"][f"torch/{name}"])
    ax.bar(range(len(ratios)), ratios)
    ax.axhline(1.05, color="red", linestyle="--", label="target 1.05")
    ax.set_xticks(range(len(ratios)), labels, fontsize=6, rotation=90)
    ax.set_ylabel("pyro / hand-written torch step")
    ax.legend()
    fig.tight_layout()
    path = folder / f"{mode}-ratios.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    paths.append(path)
    return [str(p.resolve().relative_to(relative_to.resolve())) for p in paths]
