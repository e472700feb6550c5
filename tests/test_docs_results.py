"""The Table 1 rows of ``docs/results/*.json`` (what ``pyro-attention experiment --merge`` writes) are the numbers
``docs/results.md`` prints: every row of each file stands in a table row of the page with its validation and test
perplexity, both BLEU scores and its prior entropy, at the precision the page's table gives them.  A row merged
into a JSON file without its table in the page, or a table left at an older run's numbers, fails here."""

from __future__ import annotations

import json

import pytest

from tests.support.paths import REPO

DOCS = REPO / "docs"
#: decimals of the perplexities in each file's table (IWSLT14's are per BPE token, in the hundreds)
PPL_DECIMALS = {"table1-multi30k.json": 2, "table1-iwslt14.json": 1, "transformer-multi30k.json": 2}


def table_cells(page: str) -> list[list[str]]:
    """The cells of every markdown table row of ``page``, without the ``~`` (a bound) and ``**`` (bold) marks."""
    return [[c.strip().strip("*").lstrip("~").split(" ")[0] for c in line.split("|")]
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
