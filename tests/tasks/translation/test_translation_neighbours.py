"""Every neighbour pair through the translation CLI: train, checkpoint (with the modules the pair owns),
evaluate, translate; ``--option`` and ``--estimator`` checked with clear errors."""

from __future__ import annotations

import math

import pytest
import torch

from pyro_attention import cli
from pyro_attention.models import NEIGHBOURS
from pyro_attention.tasks.translation import (
    BeamSearch,
    TranslationConfig,
    evaluate,
    load_checkpoint,
    train,
    translate_lines,
)

TINY = dict(
    train_size=16, val_size=8, test_size=4, batch_size=8, embedding=8, encoder=8, decoder=16, attention=8, epochs=1
)
SETTINGS = {
    "segmentation": {},
    "syntactic": {},
    "segmentation-marginal": {},
    "gaussian": {"options": {"kl_scale": 0.01, "anneal_steps": 4}},
    "bayesian": {"options": {"prior": "learned"}},
    "gumbel": {"estimator": "categorical"},
    "rws": {"options": {"num_particles": 3}},
}


def test_every_neighbour_has_settings():
    assert set(SETTINGS) == set(NEIGHBOURS)


@pytest.mark.parametrize("name", list(NEIGHBOURS))
def test_neighbour_trains_checkpoints_and_decodes(tmp_path, name):
    config = TranslationConfig(model=name, out=str(tmp_path / name), **TINY, **SETTINGS[name])
    result = train(config, progress=False, log=None)
    assert math.isfinite(result.best_metric)
    ckpt = load_checkpoint(tmp_path / name / "last.pt")
    # the network *and* every module the pair owns come back with the trained weights
    assert set(ckpt.pair.modules()) == set(result.pair.modules())
    for module_name, module in result.pair.modules().items():
        saved = ckpt.pair.modules()[module_name].state_dict()
        for key, value in module.state_dict().items():
            assert torch.equal(saved[key], value), (module_name, key)
    scores = evaluate(ckpt, "val", search=BeamSearch(beam=2), kmax=2).to_dict()
    recorded_ppl = result.history["epochs"]["val_ppl"][-1]
    if scores["ppl_exact"]:  # the same computation as training's validation
        assert scores["ppl"] == pytest.approx(recorded_ppl, rel=1e-6)
    else:  # two estimates, this one from EVAL_DRAWS draws per token and validation's from num_samples: within 5 of
        # their combined standard errors (an estimate's s.e. grows as 1 / sqrt(draws)); measured: 1.0 (gaussian),
        # 2.0 (gumbel), 0.1 (bayesian)
        from pyro_attention.tasks.translation.evaluation import EVAL_DRAWS

        se = scores["ppl_mc_se"] * math.sqrt(1 + EVAL_DRAWS / config.num_samples)
        assert math.isfinite(scores["ppl"]) and abs(scores["ppl"] - recorded_ppl) <= 5 * se, (scores["ppl"], se)
    # the entropies (and the guide's KL) the trainer records after every epoch are the evaluation's (the last
    # epoch's weights); None for a distribution the pair does not have
    for name in ("prior_entropy", "posterior_entropy", "guide_entropy", "guide_kl"):
        recorded = result.history["epochs"][f"val_{name}"][-1]
        assert (scores[name] is None) == (recorded is None), name
        assert scores[name] is None or scores[name] == pytest.approx(recorded, rel=1e-4, abs=1e-9), name
    out = translate_lines(ckpt, ["a b c"], search=BeamSearch(beam=2))
    assert len(out) == 1


def test_unknown_option_and_estimator_are_named(tmp_path, capsys):
    base = ["train", "--out", str(tmp_path / "x"), "--quiet", "--train-size", "8", "--val-size", "4"]
    with pytest.raises(SystemExit) as e:
        cli.main([*base, "--model", "bayesian", "--option", "kl_weight=0.1"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "argument --options: pair 'bayesian' has no option 'kl_weight'" in err and "kl_scale=1.0" in err
    with pytest.raises(SystemExit):
        cli.main([*base, "--model", "gumbel", "--estimator", "enum"])
    assert "estimator must be one of sampled, categorical; got 'enum'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main([*base, "--model", "rws", "--option", "num_particles"])
    assert "expected KEY=VALUE" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main([*base, "--model", "segmentation-marginl"])
    assert "invalid choice: 'segmentation-marginl'" in capsys.readouterr().err


def test_checkpoint_of_another_pair_option_is_refused(tmp_path):
    config = TranslationConfig(model="gaussian", out=str(tmp_path / "g"), **TINY, options={"kl_scale": 0.01})
    train(config, progress=False, log=None)
    with pytest.raises(ValueError, match="options: checkpoint {'kl_scale': 0.01}, this run {'kl_scale': 0.1}"):
        train(config.replace(options={"kl_scale": 0.1}, epochs=2), progress=False, log=None, resume=True)
