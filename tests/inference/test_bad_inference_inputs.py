"""Bad input to inference (``fit``, MAP alignments, NUTS, the ArviZ export): this layer's entries of the bad-input
catalogue, each a mistake committed once that must get a clear error (:func:`tests.support.mistakes.check_mistake`;
docs/troubleshooting.md lists every layer's)."""

from __future__ import annotations

import pytest

from pyro_attention.files import WriteError
from pyro_attention.inference import (
    fit,
    map_alignment,
    nuts_alignment,
    save_netcdf,
    to_inference_data,
)
from pyro_attention.models import MarginalLikelihood, SoftAttention
from tests.support.mistakes import (
    NAMES,
    SIZES,
    WRITES,
    Mistake,
    check_mistake,
    region_net,
    work_file,
)

pytestmark = pytest.mark.usefixtures("mistake_work_dir")

CATALOGUE: list[Mistake] = [
    Mistake(
        "map-without-latent", NAMES, "`map_alignment` of soft attention",
        lambda: map_alignment(SoftAttention(region_net()[0]), region_net()[1]),
        ValueError, r"SoftAttention has no categorical alignment to decode",
        "Read its attention weights with `alignment_posterior` instead.",
    ),
    Mistake(
        "nuts-non-simplex", NAMES, "NUTS on a pair with a discrete alignment",
        lambda: nuts_alignment(MarginalLikelihood(region_net()[0]), region_net()[1][:1]),
        ValueError, r"nuts_alignment is for continuous alignments; MarginalLikelihood has 'categorical'",
        "Use `alignment_posterior` (the exact posterior) for categorical pairs.",
    ),
    Mistake(
        "inference-data-one-sample", SIZES, "ArviZ data from a single draw",
        lambda: to_inference_data(MarginalLikelihood(region_net()[0]), region_net()[1], num_samples=1),
        ValueError, r"num_samples must be >= 2, got 1",
        "Draw at least 2 samples.",
    ),
    Mistake(
        "fit-batch-size-zero", SIZES, "training with batch size 0",
        lambda: fit(SoftAttention(region_net()[0]), [region_net()[1]], batch_size=0, progress=False),
        ValueError, r"fit: need num_epochs >= 0, batch_size >= 1, .*got num_epochs=1, batch_size=0",
        "Use batch_size >= 1.",
    ),
    Mistake(
        "fit-no-batches", SIZES, "training on an empty list of batches (it silently did nothing)",
        lambda: fit(SoftAttention(region_net()[0]), [], progress=False),
        ValueError, r"fit: the training data \(list\) holds no batches; nothing to train on",
        "Check that the data loaded (an empty file, a filter that dropped everything).",
    ),
    Mistake(
        "fit-warmup-without-guide", SIZES, "warm-up steps for a pair without a warm-up guide",
        lambda: fit(SoftAttention(region_net()[0]), [region_net()[1]], warmup_steps=3, progress=False),
        ValueError, r"fit: warmup_steps=3 but SoftAttention has no warmup_guide",
        "Use warm-up only with pairs that define `warmup_guide` (the Dirichlet pair).",
    ),
    Mistake(
        "fit-infinite-lr", SIZES, "training with an infinite learning rate (it returned all-NaN weights)",
        lambda: fit(SoftAttention(region_net()[0]), [region_net()[1]], lr=float("inf"), progress=False),
        ValueError, r"fit: lr must be a learning rate in \(0, 1\] .*got inf",
        "Use a finite learning rate > 0 (1e-3 to 3e-3 is typical).",
    ),
    Mistake(
        "fit-lr-out-of-range", SIZES, "`fit(..., lr=1e30)`",
        lambda: fit(SoftAttention(region_net()[0]), [region_net()[1]], lr=1e30, progress=False),
        ValueError, r"fit: lr must be a learning rate in \(0, 1\] .*got 1e\+30",
        "Use a learning rate in (0, 1].",
    ),
    Mistake(
        "fit-log-csv-not-writable", WRITES, "`fit(log_csv=...)` where the file cannot be made",
        lambda: fit(SoftAttention(region_net()[0]), [region_net()[1]], progress=False,
                    log_csv=work_file("c-file", "x\n") / "log.csv"),
        WriteError, r"cannot write .*c-file/log\.csv: Not a directory \(errno 20\)",
        "Give a path you can write to.",
    ),
    Mistake(
        "netcdf-not-writable", WRITES, "`save_netcdf(data, path)` (what `pyro-attention inspect --out` calls) where "
        "no folder can be made",
        lambda: save_netcdf(to_inference_data(SoftAttention(region_net()[0]), region_net()[1], num_samples=4),
                            work_file("e-file", "x\n") / "post.nc"),
        WriteError, r"cannot write .*e-file/post\.nc: File exists \(errno 17\): .*e-file is a file, not a folder",
        "Give a path you can write to; an existing file there is left as it was.",
    ),
    Mistake(
        "fit-count-not-whole", SIZES, "`fit` given an epoch count that is not a whole number (NaN trained nothing, "
        "without a word)",
        lambda: fit(SoftAttention(region_net()[0]), [region_net()[1]], num_epochs=float("nan"), progress=False),
        TypeError, r"fit: num_epochs must be a whole number \(an int\), got nan \(float\)",
        "Give an int.",
    ),
    Mistake(
        "draws-count-not-whole", SIZES, "`to_inference_data` (or `nuts_alignment`) given a draw count that is not a "
        "whole number",
        lambda: to_inference_data(MarginalLikelihood(region_net()[0]), region_net()[1], num_samples=100.0),
        TypeError, r"to_inference_data: num_samples must be a whole number \(an int\), got 100\.0 \(float\)",
        "Give an int.",
    ),
]  # fmt: skip


@pytest.mark.parametrize("mistake", CATALOGUE, ids=[m.id for m in CATALOGUE])
def test_mistake_gets_a_clear_error(mistake: Mistake):
    check_mistake(mistake)
