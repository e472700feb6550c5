"""What the public inference functions answer for every registry pair on the toy networks.

``snapshot()`` computes it (float64, fixed seeds); ``tests/support/data/pair_methods_before.pt`` holds the values
computed before the pairs got their explicit methods (#16 item 1), and ``tests/models/test_pair_methods.py`` compares.
Regenerate (only when a change of numbers is intended): ``python -m tests.support.pair_snapshot``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pyro
import torch

from pyro_attention.data.translation import collate
from pyro_attention.inference import (
    alignment_posterior,
    diagnostics,
    kmax_log_likelihood,
    log_likelihood,
    map_alignment,
    predict,
    to_inference_data,
)
from pyro_attention.inference import arviz_generation as azg
from pyro_attention.networks.seq2seq import Seq2Seq
from pyro_attention.registry import ALL_PAIRS, make_pair
from pyro_attention.tasks.translation.decoding import greedy, translate
from tests.support.toy_network import ToyNetwork, make_toy_batch

BEFORE = Path(__file__).parent / "data" / "pair_methods_before.pt"
#: the attributes to_inference_data writes (ArviZ adds a creation time and its version)
OUR_ATTRS = ("pair", "estimator", "log_likelihood_method", "log_likelihood_exact", "latent", "posterior_source", "loo")


def _call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` after seeding Pyro, as plain data; an error as ``("error", type, message)``, the type
    being the built-in one a caller catches (a ``RuleError`` is the ``ValueError`` it subclasses)."""
    pyro.set_rng_seed(0)
    try:
        return _plain(fn(*args, **kwargs))
    except (ValueError, NotImplementedError, RuntimeError) as e:
        return ("error", next(c.__name__ for c in type(e).__mro__ if c.__module__ == "builtins"), str(e))


def _plain(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x.detach().to(torch.float64).clone() if x.is_floating_point() else x.detach().clone()
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_plain(v) for v in x)
    if hasattr(x, "per_token"):  # LogLikelihood
        return {"per_token": _plain(x.per_token), "exact": bool(x.exact), "method": x.method}
    if isinstance(x, (np.floating, float)):
        return float(x)
    return x


def _idata(pair: Any, batch: Any) -> dict[str, Any]:
    idata = to_inference_data(pair, batch, num_samples=8, num_importance_samples=5, num_chains=2)
    attrs = {k: v for k, v in idata.constant_data.attrs.items() if k in OUR_ATTRS}
    groups = azg.group_names(idata)
    out: dict[str, Any] = {"groups": sorted(groups), "attrs": attrs}
    for group in ("posterior", "prior", "constant_data", "sample_stats"):
        if group in groups:
            data = azg.group(idata, group)
            out[group] = {name: torch.as_tensor(np.asarray(data[name].values, dtype=np.float64))
                          for name in data.data_vars if data[name].dtype.kind == "f"}
    return out


def toy_values(name: str) -> dict[str, Any]:
    torch.manual_seed(0)
    pair = make_pair(name, ToyNetwork())
    batch = make_toy_batch(B=2, S=3, T=2, seed=1)
    out: dict[str, Any] = {
        "log_likelihood": _call(log_likelihood, pair, batch, num_samples=7),
        "log_likelihood_prior": _call(log_likelihood, pair, batch, num_samples=5, proposal="prior"),
        "alignment_posterior": _call(alignment_posterior, pair, batch),
        "map_alignment": _call(map_alignment, pair, batch),
        "kmax_1": _call(kmax_log_likelihood, pair, batch, 1),
        "kmax_3": _call(kmax_log_likelihood, pair, batch, 3),
        "diagnostics": _call(diagnostics, pair, batch, num_samples=8),
        "idata": _call(_idata, pair, batch),
    }
    for rule in (None, "marginal", "soft", "kmax"):
        out[f"predict_{rule}"] = _call(predict, pair, batch, rule, num_samples=5, k=2)
    return out


def decode_values(name: str) -> dict[str, Any]:
    torch.manual_seed(0)
    net = Seq2Seq(12, 12, embedding_size=8, encoder_size=6, decoder_size=8, attention_size=6)
    pair = make_pair(name, net)
    batch = collate([([4, 5, 6, 7], [5, 6]), ([8, 9], [4]), ([10, 11, 4], [7, 7, 7])])
    out: dict[str, Any] = {"default_rule": _call(lambda p: str(p.rule(None, decoding=True)), pair)}
    for rule in ("soft", "marginal", "kmax"):
        out[f"beam_{rule}"] = _call(translate, pair, batch.source, batch.source_mask, beam_size=2, rule=rule, k=2,
                                    max_len=5)
        out[f"greedy_{rule}"] = _call(greedy, pair, batch.source, batch.source_mask, rule=rule, k=2, max_len=5)
    out["log_likelihood"] = _call(log_likelihood, pair, batch, num_samples=4)
    out["kmax_2"] = _call(kmax_log_likelihood, pair, batch, 2)
    out["predict_None"] = _call(predict, pair, batch, None, num_samples=3, k=2)
    return out


def snapshot() -> dict[str, Any]:
    dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        out = {}
        for name in ALL_PAIRS:
            pyro.clear_param_store()
            out[f"toy/{name}"] = toy_values(name)
            pyro.clear_param_store()
            out[f"seq2seq/{name}"] = decode_values(name)
        return out
    finally:
        torch.set_default_dtype(dtype)
        pyro.clear_param_store()


def differences(before: Any, after: Any, where: str = "", atol: float = 1e-9, rtol: float = 1e-7) -> list[str]:
    """Where ``after`` differs from ``before`` (tensors: beyond ``atol + rtol |before|``, NaN equal to NaN)."""
    if isinstance(before, torch.Tensor):
        if not isinstance(after, torch.Tensor) or before.shape != after.shape or before.dtype != after.dtype:
            return [f"{where}: {before!r} -> {after!r}"]
        if before.is_floating_point():
            ok = torch.allclose(before, after, atol=atol, rtol=rtol, equal_nan=True)
        else:
            ok = torch.equal(before, after)
        return [] if ok else [f"{where}: max |diff| {float((before - after).abs().nan_to_num().max()):.3g}"]
    if isinstance(before, dict):
        if not isinstance(after, dict) or set(before) != set(after):
            return [f"{where}: keys {sorted(before) if isinstance(before, dict) else before} -> "
                    f"{sorted(after) if isinstance(after, dict) else after}"]
        return [d for k in before for d in differences(before[k], after[k], f"{where}/{k}", atol, rtol)]
    if _is_error(before) or _is_error(after):  # refusals: the same kind of error (the wording may improve)
        same = _is_error(before) and _is_error(after) and before[1] == after[1]
        return [] if same else [f"{where}: {before!r} -> {after!r}"]
    if isinstance(before, (list, tuple)):
        if not isinstance(after, (list, tuple)) or len(before) != len(after):
            return [f"{where}: {before!r} -> {after!r}"]
        return [d for i, (b, a) in enumerate(zip(before, after, strict=True))
                for d in differences(b, a, f"{where}[{i}]", atol, rtol)]
    if isinstance(before, float) and isinstance(after, float):
        same = (math.isnan(before) and math.isnan(after)) or math.isclose(before, after, rel_tol=rtol, abs_tol=atol)
        return [] if same else [f"{where}: {before} -> {after}"]
    return [] if before == after else [f"{where}: {before!r} -> {after!r}"]


def _is_error(x: Any) -> bool:
    return isinstance(x, tuple) and len(x) == 3 and x[0] == "error"


if __name__ == "__main__":
    BEFORE.parent.mkdir(exist_ok=True)
    torch.save(snapshot(), BEFORE)
    print(f"wrote {BEFORE}")
