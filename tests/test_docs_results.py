"""The Table 1 rows of ``docs/results/*.json`` (what ``pyro-attention experiment --merge`` writes) are the numbers
``docs/results.md`` prints: every row of each file stands in a table row of the page with its validation and test
perplexity, both BLEU scores and its prior entropy, at the precision the page's table gives them.  A row merged
into a JSON file without its table in the page, or a table left at an older run's numbers, fails here.  The same
holds for the toolkit's Transformer row and the Transformer's alignment error rates (``docs/results/aer.json``)."""

from __future__ import annotations

import json
import re

import pytest

from tests.support.paths import REPO

DOCS = REPO / "docs"
#: decimals of the perplexities in each file's table (IWSLT14's are per BPE token, in the hundreds)
PPL_DECIMALS = {"table1-multi30k.json": 2, "table1-iwslt14.json": 1, "transformer-multi30k.json": 2}


def table_cells(page: str) -> list[list[str]]:
    """The cells of every markdown table row of ``page``, without the ``~`` (a bound) and ``**`` (bold) marks."""
    return [[c.replace("*", "").strip().lstrip("~").split(" ")[0] for c in line.split("|")]
            for line in page.splitlines() if line.startswith("|")]


@pytest.mark.parametrize("name", sorted(PPL_DECIMALS))
def test_every_row_of_the_json_file_is_a_table_row_of_results_md(name: str) -> None:
    rows = json.loads((DOCS / "results" / name).read_text())
    tables = table_cells((DOCS / "results.md").read_text())
    missing = []
    for row in rows:
        d = PPL_DECIMALS[name]
        want = [format(row["val_ppl"], f".{d}f"), format(row["test_ppl"], f".{d}f"), format(row["bleu"], ".2f"),
                format(row["bleu_tok_none"], ".2f"), format(row["prior_entropy"], ".3f")]
        if not any(all(w in cells for w in want) for cells in tables):
            missing.append(f"{row['label']} ({row['device']}): val PPL, test PPL, BLEU, BLEU tok none, H(prior) = "
                           f"{', '.join(want)}")
    assert rows and not missing, f"rows of docs/results/{name} in no table of docs/results.md:\n" + "\n".join(missing)


def test_the_toolkits_transformer_row_is_the_one_peer_quality_wrote() -> None:
    """``docs/results/peer-transformer-multi30k.json`` (``benchmarks/peer_quality.py``) stands in the Transformer
    table with its validation and test perplexity and both BLEU scores."""
    peer = json.loads((DOCS / "results" / "peer-transformer-multi30k.json").read_text())
    want = [format(peer["val_ppl"], ".2f"), format(peer["test_ppl"], ".2f"), format(peer["bleu"], ".2f"),
            format(peer["bleu_tok_none"], ".2f")]
    rows = [cells for cells in table_cells((DOCS / "results.md").read_text()) if any("OpenNMT" in c for c in cells)]
    assert any(all(w in cells for w in want) for cells in rows), want


#: the Transformer alignment table's rows: (pair, what is read off) -> (aer.json model, source)
TRANSFORMER_AER = {
    "soft: top layer's cross-attention (mean over heads)": ("transformer-ev-soft", "cross-attention"),
    "soft: alignment head's weights": ("transformer-ev-soft", "soft"),
    "VA-enum: top layer's cross-attention (mean over heads)": ("transformer-ev-variational", "cross-attention"),
    "VA-enum: prior": ("transformer-ev-variational", "prior"),
    "VA-enum: guide q": ("transformer-ev-variational", "q"),
    "VA-enum: exact posterior": ("transformer-ev-variational", "posterior"),
}
LINK_SETS = ("intersection", "union", "grow-diag", "grow-diag-final")


def test_the_transformer_alignment_table_is_aer_json() -> None:
    """results.md's "A Transformer's alignments" prints ``docs/results/aer.json``'s rows: per gold set the forward
    AER, the best of the four link sets (a posterior's threshold links included) and the two directions' mean."""
    page = (DOCS / "results.md").read_text()
    section = page[page.index("### A Transformer's alignments"):]
    rows = json.loads((DOCS / "results" / "aer.json").read_text())

    def aer(corpus: str, model: str, source: str) -> dict[str, float]:
        return {r["symmetrisation"]: r["aer"] for r in rows
                if (r["corpus"], r["model"], r["source"]) == (corpus, model, source)}

    checked = 0
    for line in section.splitlines():
        cells = [c.strip() for c in line.split("|")[1:-1]]
        if not cells or cells[0] not in TRANSFORMER_AER:
            continue
        model, source = TRANSFORMER_AER[cells.pop(0)]
        for corpus, (forward, best, mean) in zip(("enfr", "csen"), (cells[:3], cells[3:]), strict=True):
            got, threshold = aer(corpus, model, source), aer(corpus, model, f"{source}-threshold")
            lowest = min(v for links in (got, threshold) for k, v in links.items() if k in LINK_SETS)
            assert forward.strip("*") == f"{got['forward']:.2f}", (corpus, model, source)
            assert best.split(" ")[0].strip("*") == f"{lowest:.2f}", (corpus, model, source)
            assert mean.strip("*") == (f"{got['posterior-mean']:.2f}" if "posterior-mean" in got else "-")
            checked += 1
    assert checked == 2 * len(TRANSFORMER_AER)  # every row, both gold sets


def test_the_exact_rows_time_to_quality_table_is_the_json_file() -> None:
    """performance.md's table of the exact rows under autocast prints ``docs/results/time-to-quality.json``'s
    ``"exact rows"``: per run its best validation perplexity, the minutes to its best epoch, its test perplexity and
    its BLEU with ``tokenize="none"``."""
    page = (DOCS / "performance.md").read_text()
    section = page[page.index("### The exact rows under autocast"):page.index("## Decoding speed")]
    numbers = {n for line in section.splitlines() if line.startswith("|") for n in re.findall(r"\d+\.\d+", line)}
    runs = json.loads((DOCS / "results" / "time-to-quality.json").read_text())["exact rows"]
    finished = [(row, label, run) for row, by_label in runs.items() for label, run in by_label.items() if "best" in run]
    assert len(finished) >= 3
    for row, label, run in finished:
        best = run["best"]
        want = [format(best["val_ppl"], ".2f"), format(run["seconds_to_best_epoch"] / 60, ".1f"),
                format(best["test_ppl"], ".2f"), format(best["bleu_tok_none"], ".2f")]
        assert all(w in numbers for w in want), (row, label, want)


def test_the_table_of_variants_after_the_recipe_is_the_json_file() -> None:
    """results.md's table of the variants run after the recipe's choice prints
    ``docs/results/align-recipe-after.json``: the recipe, then each variant's flags, and the five texts' AERs."""
    rows = json.loads((DOCS / "results" / "align-recipe-after.json").read_text())["rows"]
    tables = [cells[1:7] for cells in table_cells((DOCS / "results.md").read_text())]
    texts = ("deen", "enfr", "enfr-cut", "csen", "csen-cut")
    variants = list(dict.fromkeys(r["flags"] for r in rows))
    assert variants[0] == "" and len(variants) == 6  # the recipe itself, then five variants
    for variant in variants:
        aer = {r["text"]: r["aer"] for r in rows if r["flags"] == variant}
        first = f"`{variant}`".split(" ")[0] if variant else "the"  # a cell's first word ("the recipe")
        want = [first] + [format(aer[t], ".2f") for t in texts]
        assert want in tables, f"{variant or 'the recipe'}: no row {' | '.join(want)} in docs/results.md"


def test_the_align_recipe_table_is_the_json_file() -> None:
    """results.md's table of the recipe's variants prints ``docs/results/align-recipe.json`` (four flags, then the
    five texts' AERs), and ``RECIPE`` is the variant with the lowest AER on the held-out text (``deen``)."""
    from pyro_attention.tasks.align.links import RECIPE

    rows = json.loads((DOCS / "results" / "align-recipe.json").read_text())["rows"]
    page = (DOCS / "results.md").read_text()
    tables = [cells[1:10] for cells in table_cells(page)]
    flags = ("--ibm1-epochs", "--epochs", "--table-prior", "--null-prob")
    texts = ("deen", "enfr", "enfr-cut", "csen", "csen-cut")
    printed = 0
    for variant in dict.fromkeys(r["flags"] for r in rows):
        words = variant.split()
        given = dict(zip(words[::2], words[1::2], strict=True))
        if set(given) != set(flags):
            continue  # --lr / --batch-size: quoted in the text under the table
        aer = {r["text"]: r["aer"] for r in rows if r["flags"] == variant}
        want = [given[f] for f in flags] + [format(aer[t], ".2f") for t in texts]
        assert want in tables, f"{variant}: no row {' | '.join(want)} in docs/results.md"
        printed += 1
    assert printed >= 10
    chosen = min((r for r in rows if r["text"] == "deen"), key=lambda r: r["aer"])["flags"]
    assert chosen == " ".join(f"--{k.replace('_', '-')} {RECIPE[k]:g}"
                              for k in ("ibm1_epochs", "epochs", "table_prior", "null_prob")), \
        "RECIPE is not the variant with the lowest AER on the held-out de-en gold"


def test_the_identical_text_table_is_the_json_file() -> None:
    """results.md's table of the default command against eflomal prints ``docs/results/align-identical-text.json``:
    our AER and eflomal's range of best link sets, per gold set."""
    runs = json.loads((DOCS / "results" / "align-identical-text.json").read_text())
    tables = table_cells((DOCS / "results.md").read_text())
    for name, result in runs.items():
        eflomal = sorted(r["aer"] for r in result["eflomal"]["runs"])
        want = [format(result["pyro-attention"]["aer"], ".2f"), f"{eflomal[0]:.2f}–{eflomal[-1]:.2f}"]
        assert any(all(w in cells for w in want) for cells in tables), f"{name}: {want} in no table of results.md"


def test_the_sampled_links_table_is_the_json_file() -> None:
    """results.md's table of sampled links prints ``docs/results/align-gibbs.json``: each variant's five AERs, and for
    the later variants the change against the first (the exact posterior) with its standard error."""
    from pyro_attention.tasks.align.links import RECIPE

    data = json.loads((DOCS / "results" / "align-gibbs.json").read_text())
    page = (DOCS / "results.md").read_text()
    section = page[page.index("### Sampled links"):page.index("### A Transformer's alignments")]
    tables = [[c.strip() for c in line.split("|")] for line in section.splitlines() if line.startswith("|")]
    texts = ("deen", "enfr", "enfr-cut", "csen", "csen-cut")
    variants = list(dict.fromkeys(r["flags"] for r in data["rows"]))
    assert variants == ["--gibbs-sweeps 0", "", "--gibbs-sweeps 30"]
    first = {r["text"]: r["aer"] for r in data["rows"] if r["flags"] == variants[0]}
    for variant in variants:
        rows = {r["text"]: r for r in data["rows"] if r["flags"] == variant}
        want = [format(rows[t]["aer"], ".2f") if variant == variants[0] else
                f"{rows[t]['aer']:.2f} ({rows[t]['aer'] - first[t]:+.2f} ± {rows[t]['se_against_first']:.2f})"
                for t in texts]
        assert any(cells[2:7] == want for cells in tables), f"{variant or 'the recipe'}: no row {want} in results.md"
    assert RECIPE["gibbs_sweeps"] == 10
