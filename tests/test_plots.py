"""Figures say what they show: pair, network and split in the (sup)title, named axes, the gold box explained in a
legend, panels in the order prior / posterior / q, soft attention's row named as such, the k-hat plot's threshold.
Each figure is built with matplotlib's Agg backend on a tiny model and its texts are read back."""

from __future__ import annotations

import warnings

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from pyro_attention import plots  # noqa: E402
from pyro_attention.inference import alignment_posterior, to_inference_data  # noqa: E402
from pyro_attention.models import RelaxedAttention, SoftAttention, VariationalAttention  # noqa: E402
from tests.support.toy_network import ToyNetwork, make_toy_batch  # noqa: E402

warnings.filterwarnings("ignore", category=FutureWarning)


@pytest.fixture
def tiny():
    torch.manual_seed(0)
    return ToyNetwork(), make_toy_batch(B=3, S=4, T=3)


def _ytick_texts(ax) -> list[str]:  # noqa: ANN001
    return [t.get_text() for t in ax.get_yticklabels()]


def _legend_texts(ax) -> list[str]:  # noqa: ANN001
    legend = ax.get_legend()
    return [t.get_text() for t in legend.get_texts()] if legend else []


def test_region_qa_figure_names_everything(tiny):
    net, batch = tiny
    post = alignment_posterior(VariationalAttention(net), batch)
    labels = [["red cat", "blue cup", "green hat", "red box"], ["a", "b", "c"], ["d", "e", "f"]]
    fig = plots.alignment_figure(
        post,
        [0, 2],
        labels,
        ["#0: what colour is the cat? -> red", "#2: q2"],
        suptitle="variational (enum) (ToyNetwork): toy, held-out",
        gold=torch.tensor([0, 1, 2]),
    )
    assert fig._suptitle.get_text() == "variational (enum) (ToyNetwork): toy, held-out"
    first, second = fig.axes[0], fig.axes[1]
    assert first.get_title() == "#0: what colour is the cat? -> red" and second.get_title() == "#2: q2"
    for ax in (first, second):
        assert ax.get_xlabel() == "region" and ax.get_ylabel() == "question"
        assert _ytick_texts(ax) == ["prior p(z|x)", "posterior p(z|x,y)", "q(z|x,y)"]  # fixed order
        assert _legend_texts(ax) == ["gold region (the answer is read from it)"]  # the red box, explained
    assert [t.get_text() for t in first.get_xticklabels()] == labels[0]
    assert len(second.get_xticklabels()) == 3  # real regions only
    assert fig.axes[-1].get_ylabel() == "probability"  # the colour bar
    plt.close(fig)


def test_panel_order_does_not_follow_the_dict(tiny):
    net, batch = tiny
    post = alignment_posterior(VariationalAttention(net), batch)
    shuffled = {k: post[k] for k in ("guide", "posterior", "prior")}
    fig = plots.alignment_figure(shuffled, [0], [list("abcd")] * 3, ["t"], suptitle="s")
    assert _ytick_texts(fig.axes[0]) == ["prior p(z|x)", "posterior p(z|x,y)", "q(z|x,y)"]
    assert _legend_texts(fig.axes[0]) == []  # no gold given: no box, no legend
    plt.close(fig)
    fig = plots.translation_figure(shuffled, 0, list("abcd"), list("xyz"), title="t")
    assert [ax.get_title() for ax in fig.axes[:3]] == ["prior p(z|x)", "posterior p(z|x,y)", "q(z|x,y)"]
    plt.close(fig)


def test_soft_attention_is_not_called_a_prior(tiny):
    net, batch = tiny
    post = alignment_posterior(SoftAttention(net), batch)
    fig = plots.alignment_figure(post, [0], [list("abcd")] * 3, ["t"], suptitle="soft (ToyNetwork)", soft=True)
    assert _ytick_texts(fig.axes[0]) == ["soft attention weights"]
    plt.close(fig)
    fig = plots.translation_figure(post, 0, list("abcd"), list("xyz"), title="soft", soft=True)
    assert fig.axes[0].get_title() == "soft attention weights"
    plt.close(fig)


def test_translation_figure_names_languages_and_what_it_shows(tiny):
    net, batch = tiny
    post = alignment_posterior(VariationalAttention(net), batch)
    title = "VariationalAttention (enum), Seq2Seq network, val split: sentence pair 0"
    fig = plots.translation_figure(
        post,
        0,
        ["ein", "Hund", "läuft", "</s>"],
        ["a", "dog", "runs"],
        title=title,
        source_lang="de",
        target_lang="en",
    )
    assert fig._suptitle.get_text() == title
    panels = fig.axes[:3]
    assert [ax.get_xlabel() for ax in panels] == ["source (de)"] * 3
    assert panels[0].get_ylabel() == "target (en)"
    assert [t.get_text() for t in panels[0].get_yticklabels()] == ["a", "dog", "runs"]
    plt.close(fig)
    fig = plots.translation_figure(post, 0, list("abcd"), list("xyz"), title="t")
    assert fig.axes[0].get_xlabel() == "source" and fig.axes[0].get_ylabel() == "target"
    plt.close(fig)


def test_khat_figure_has_title_threshold_and_axis_names(tiny, tmp_path):
    net, batch = tiny
    idata = to_inference_data(RelaxedAttention(net), batch, num_samples=40, num_importance_samples=20)
    fig = plots.khat_figure(idata.sample_stats["khat"], "PSIS k-hat of q: relaxed, ToyNetwork, toy split")
    ax = fig.axes[0]
    assert ax.get_title() == "PSIS k-hat of q: relaxed, ToyNetwork, toy split"
    assert ax.get_xlabel() == "example" and ax.get_ylabel().startswith("k-hat")
    assert any(np.allclose(line.get_ydata(), 0.7) for line in ax.get_lines())
    assert _legend_texts(ax) == ["k-hat = 0.7 (unreliable above)"]
    plt.close(fig)
    path = plots.khat_plot(idata.sample_stats["khat"], "t", tmp_path / "k" / "khat.png")
    assert path.read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ValueError, match="k-hat is undefined"):
        plots.khat_figure(np.full(3, np.nan), "t")


def test_demo_and_inspect_figures_say_what_they_show(tmp_path, monkeypatch):
    """The figures the commands write, captured before they are saved."""
    from pyro_attention import cli

    figures = []
    save = plots._save

    def keep(fig, path):  # noqa: ANN001, ANN202
        figures.append(
            {
                "suptitle": fig._suptitle.get_text() if fig._suptitle else "",
                "titles": [ax.get_title() for ax in fig.axes],
                "xlabels": [ax.get_xlabel() for ax in fig.axes],
                "ylabels": [ax.get_ylabel() for ax in fig.axes],
                "legends": [_legend_texts(ax) for ax in fig.axes],
            }
        )
        return save(fig, path)

    monkeypatch.setattr(plots, "_save", keep)
    args = ["demo", "--train-size", "32", "--val-size", "8", "--hidden", "8", "--epochs", "1", "--num-plots", "2"]
    assert cli.main(args + ["--out", str(tmp_path / "demo"), "--quiet"]) == 0
    (demo,) = figures
    assert demo["suptitle"] == "variational (enum), RegionQA network, synthetic region QA, held-out split"
    assert demo["xlabels"][:2] == ["region", "region"] and demo["ylabels"][:2] == ["question", "question"]
    assert ["gold region (the answer is read from it)"] in demo["legends"]
    figures.clear()
    run = tmp_path / "run"
    train = ["train", "--model", "variational", "--epochs", "1", "--train-size", "16", "--val-size", "4"]
    train += ["--batch-size", "8", "--embedding", "8", "--encoder", "8", "--decoder", "8", "--attention", "8"]
    assert cli.main(train + ["--out", str(run)]) == 0
    inspect = ["inspect", str(run), "--out", str(tmp_path / "p.nc"), "--plots", str(tmp_path / "plots")]
    assert cli.main(inspect + ["--size", "4", "--num-samples", "40", "--num-plots", "1"]) == 0
    heatmap = figures[0]
    assert heatmap["suptitle"] == "VariationalAttention (enum), Seq2Seq network, val split: sentence pair 0"
    assert heatmap["titles"][:3] == ["prior p(z|x)", "posterior p(z|x,y)", "q(z|x,y)"]
    assert heatmap["xlabels"][:3] == ["source (de)"] * 3 and heatmap["ylabels"][0] == "target (en)"
    for khat in figures[1:]:  # where k-hat is defined on these 4 sentences
        assert khat["titles"][0].startswith("PSIS k-hat of q per sentence pair: VariationalAttention (enum)")
        assert khat["xlabels"][0] == "example"


def test_the_package_leaves_matplotlibs_backend_alone():
    """Importing the figure modules and drawing a figure keeps the user's backend (a notebook's inline one): the
    figures are ``Figure`` objects, not pyplot's."""
    import subprocess
    import sys

    code = ("import matplotlib; matplotlib.use('svg'); import torch; import pyro_attention.plots as p; "
            "fig = p.alignment_figure({'prior': torch.full((1, 1, 2), 0.5)}, [0], [['a', 'b']], ['t'], 's'); "
            "import matplotlib.pyplot as plt; assert matplotlib.get_backend() == 'svg', matplotlib.get_backend(); "
            "assert plt.get_fignums() == [], plt.get_fignums(); print('ok')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr
