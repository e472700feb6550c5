"""``pyro-attention align --src --tgt --out links.txt``: the recipe by default, Pharaoh links for every pair."""

from __future__ import annotations

import pytest

from pyro_attention import cli
from pyro_attention.tasks.align.links import RECIPE, recipe_config

WORDS = [("the house", "das haus"), ("the cat", "die katze"), ("a small cat", "eine kleine katze"),
         ("the small house", "das kleine haus"), ("a cat", "eine katze"), ("the green house", "das grüne haus")]


def _text(tmp_path, pairs=WORDS, repeat=4):
    src, tgt = tmp_path / "text.en", tmp_path / "text.de"
    src.write_text("".join(f"{s}\n" for s, _ in pairs * repeat), encoding="utf-8")
    tgt.write_text("".join(f"{t}\n" for _, t in pairs * repeat), encoding="utf-8")
    return src, tgt


def test_links_for_every_pair_with_the_recipe(tmp_path, capsys):
    src, tgt = _text(tmp_path)
    out = tmp_path / "links.txt"
    assert cli.main(["align", "--src", str(src), "--tgt", str(tgt), "--out", str(out), "--ibm1-epochs", "3",
                     "--epochs", "2", "--batch-size", "8"]) == 0
    printed = capsys.readouterr()
    assert "network hmm" in printed.out and "by agreement and tables by EM" in printed.out  # the recipe
    assert f"wrote {out}: links of 24 sentence pairs" in printed.err
    lines = out.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 24
    for line, (s, t) in zip(lines, WORDS * 4, strict=True):
        links = {tuple(map(int, x.split("-"))) for x in line.split()}
        assert all(0 <= i < len(s.split()) and 0 <= j < len(t.split()) for i, j in links)
    # the words this text pairs up unambiguously, monotone: "the house" -> "das haus"
    assert set(lines[0].split()) == {"0-0", "1-1"}


def test_given_flags_win_over_the_recipe_and_other_networks_drop_its_options(tmp_path, capsys):
    src, tgt = _text(tmp_path)
    out = tmp_path / "links.txt"
    assert cli.main(["align", "--src", str(src), "--tgt", str(tgt), "--out", str(out), "--network", "ibm1",
                     "--epochs", "3", "--batch-size", "8", "--null-prob", "0.1"]) == 0
    assert "network ibm1" in capsys.readouterr().out
    assert len(out.read_text(encoding="utf-8").splitlines()) == 24
    config = recipe_config({"network": "ibm1", "epochs": 3}, {"network", "epochs"}, out=str(tmp_path))
    assert config.network == "ibm1" and config.epochs == 3 and config.both_directions == RECIPE["both_directions"]
    assert not hasattr(config.options, "table_prior")  # the recipe's HMM options are left out for IBM Model 1
    hmm = recipe_config({"network": "seq2seq", "epochs": 5}, set(), out=str(tmp_path))
    assert hmm.network == "hmm" and hmm.options.table_prior == RECIPE["table_prior"] and hmm.options.agreement


@pytest.mark.parametrize("flags, message", [
    (["--out"], "argument --out: linking a text of your own needs --src, --tgt and --out"),
    (["--gold-links", "g.txt"], "argument --gold-links: scores against a gold set"),
    (["--network", "seq2seq"], "argument --network: linking a text needs an exact posterior; choose from ibm1, hmm"),
    (["--threshold", "1.5"], "argument --threshold"),
])
def test_linking_refuses_what_it_cannot_do(tmp_path, capsys, flags, message):
    src, tgt = _text(tmp_path, repeat=1)
    argv = ["align", "--src", str(src), "--tgt", str(tgt)]
    argv += [] if flags == ["--out"] else ["--out", str(tmp_path / "links.txt"), *flags]
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "links.txt").exists()


def test_threshold_belongs_to_linking(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["align", "--threshold", "0.4", "--out", str(tmp_path)])
    assert exit_info.value.code == 2
    assert "argument --threshold: links a text of your own; give --src and --tgt" in capsys.readouterr().err


def test_an_empty_line_is_named(tmp_path, capsys):
    src, tgt = _text(tmp_path, repeat=1)
    src.write_text(src.read_text(encoding="utf-8").replace("the cat\n", "\n"), encoding="utf-8")
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["align", "--src", str(src), "--tgt", str(tgt), "--out", str(tmp_path / "links.txt")])
    assert exit_info.value.code == 1
    assert f"{src}: line 2 is empty" in capsys.readouterr().err
