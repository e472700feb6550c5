"""``pyro-attention align --src --tgt --out links.txt``: the recipe by default, Pharaoh links for every pair."""

from __future__ import annotations

from pyro_attention import cli
from pyro_attention.tasks.align.links import RECIPE, recipe_config

WORDS = [("the house", "das haus"), ("the cat", "die katze"), ("a small cat", "eine kleine katze"),
         ("the small house", "das kleine haus"), ("a cat", "eine katze"), ("the green house", "das grüne haus")]


def write_bitext(tmp_path, pairs=WORDS, repeat=4):
    src, tgt = tmp_path / "text.en", tmp_path / "text.de"
    src.write_text("".join(f"{s}\n" for s, _ in pairs * repeat), encoding="utf-8")
    tgt.write_text("".join(f"{t}\n" for _, t in pairs * repeat), encoding="utf-8")
    return src, tgt


def _link(tmp_path, capsys, *flags):
    """``align --src --tgt --out`` on :func:`write_bitext`'s text with ``flags``: the link lines and what it printed."""
    src, tgt = write_bitext(tmp_path)
    out = tmp_path / "links.txt"
    assert cli.main(["align", "--src", str(src), "--tgt", str(tgt), "--out", str(out), *flags]) == 0
    return out.read_text(encoding="utf-8").splitlines(), capsys.readouterr()


def test_links_for_every_pair_with_the_recipe(tmp_path, capsys):
    lines, printed = _link(tmp_path, capsys, "--ibm1-epochs", "3", "--epochs", "2", "--batch-size", "8")
    assert "network hmm" in printed.out and "by agreement and tables by EM" in printed.out  # the recipe
    assert "hmm: lexical table of " in printed.out and "co-occurring in >= 1 sentence pairs" in printed.out
    assert "collapsed Gibbs sampling's (10 sweeps, Dirichlet(0.0001) tables)" in printed.out
    assert f"wrote {tmp_path / 'links.txt'}: links of 24 sentence pairs" in printed.err
    assert len(lines) == 24
    for line, (s, t) in zip(lines, WORDS * 4, strict=True):
        links = {tuple(map(int, x.split("-"))) for x in line.split()}
        assert all(0 <= i < len(s.split()) and 0 <= j < len(t.split()) for i, j in links)
    # the words this text pairs up unambiguously, monotone: "the house" -> "das haus"
    assert set(lines[0].split()) == {"0-0", "1-1"}


def test_given_flags_win_over_the_recipe_and_other_networks_drop_its_options(tmp_path, capsys):
    lines, printed = _link(tmp_path, capsys, "--network", "ibm1", "--epochs", "3", "--batch-size", "8",
                           "--null-prob", "0.1", "--min-cooccurrence", "2")
    assert "network ibm1" in printed.out and len(lines) == 24
    config = recipe_config({"network": "ibm1", "epochs": 3, "min_cooccurrence": 2},
                           {"network", "epochs", "min_cooccurrence"}, out=str(tmp_path))
    assert config.network == "ibm1" and config.epochs == 3 and config.both_directions == RECIPE["both_directions"]
    assert config.options.min_cooccurrence == 2
    assert not hasattr(config.options, "table_prior")  # the recipe's HMM options are left out for IBM Model 1
    hmm = recipe_config({"network": "seq2seq", "epochs": 5}, set(), out=str(tmp_path))
    assert hmm.network == "hmm" and hmm.options.table_prior == RECIPE["table_prior"] and hmm.options.agreement


def test_links_are_the_mean_posterior_of_each_pair_whatever_the_batches(trained_recipe):
    import torch

    from pyro_attention.networks.lexical import with_null_word
    from pyro_attention.tasks.align.links import LINK_THRESHOLD, text_links

    forward, reverse, text = trained_recipe

    def alone(trained, source, target):  # one pair in its own batch, the NULL column and </s> row dropped
        from pyro_attention.data.translation import collate

        ids = trained.src_vocab.encode(source)
        batch = collate([(with_null_word(ids), trained.tgt_vocab.encode(target))])
        with torch.no_grad():
            return trained.pair.network.likelihood_terms(batch)[2][0, : len(target), 1: 1 + len(source)]

    expected = []
    for s, t in zip(text.source, text.target, strict=True):
        mean = (alone(forward, s, t) + alone(reverse, t, s).T) / 2
        expected.append({(int(i), int(j)) for j, i in (mean >= LINK_THRESHOLD).nonzero().tolist()})
    assert any(expected)
    assert text_links(forward, reverse, text.source, text.target) == expected
    assert text_links(forward, reverse, text.source, text.target, batch_size=1) == expected
    printed: list[str] = []
    assert text_links(forward, reverse, text.source, text.target, batch_size=3, log=printed.append,
                      every=0.0) == expected
    n = len(text.source)
    assert printed[-1].startswith(f"linking: {n} of {n} sentence pairs, ") and len(printed) == -(-n // 3)


def test_linking_batches_bound_both_directions_cells(monkeypatch):
    from pyro_attention.tasks.align import links

    monkeypatch.setattr(links, "CELLS", 2_000)
    src = [[4] * n for n in (1, 3, 9, 2, 12, 5, 7)]
    tgt = [[5] * n for n in (8, 2, 3, 11, 4, 6, 1)]
    chunks = list(links._batches(src, tgt, largest=4))
    assert sorted(i for c in chunks for i in c) == list(range(7))
    for chunk in chunks:
        t = max(len(tgt[i]) + 1 for i in chunk)
        s = max(len(src[i]) + 1 for i in chunk)
        assert len(chunk) <= 4 and (len(chunk) == 1 or len(chunk) * t * s * max(s, t) <= 2_000)


def test_gibbs_links_average_the_exact_and_the_sampled_posteriors(tmp_path, capsys, trained_recipe):
    from pyro_attention.tasks.align.gibbs import CollapsedGibbs
    from pyro_attention.tasks.align.links import text_links

    forward, reverse, text = trained_recipe
    exact = text_links(forward, reverse, text.source, text.target)
    sampled = text_links(forward, reverse, text.source, text.target, sampler=CollapsedGibbs(sweeps=6, seed=3))
    assert sampled == text_links(forward, reverse, text.source, text.target, sampler=CollapsedGibbs(sweeps=6, seed=3))
    assert len(sampled) == len(exact) and sum(map(len, sampled)) > 0
    # the command: the flags reach the sampler
    lines, printed = _link(tmp_path, capsys, "--ibm1-epochs", "2", "--epochs", "1", "--batch-size", "8",
                           "--gibbs-sweeps", "4", "--gibbs-alpha", "0.01")
    assert "collapsed Gibbs sampling's (4 sweeps, Dirichlet(0.01) tables)" in printed.out and len(lines) == 24
