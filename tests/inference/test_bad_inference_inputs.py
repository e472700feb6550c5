"""Bad input to inference (``fit``, MAP alignments, NUTS, the ArviZ export): this layer's entries of the bad-input
catalogue, each a mistake committed once that must get a clear error (:func:`tests.support.mistakes.check_mistake`;
docs/troubleshooting.md lists every layer's)."""

from __future__ import annotations

from pyro_attention.files import WriteError
from pyro_attention.inference import fit, map_alignment, nuts_alignment, save_netcdf, to_inference_data
from pyro_attention.models import MarginalLikelihood, SoftAttention
from tests.support import mistakes as m

CATALOGUE: list[m.Mistake] = [
    m.Mistake(
        "map-without-latent", m.NAMES, "`map_alignment` of soft attention",
        lambda: map_alignment(SoftAttention(m.region_net()[0]), m.region_net()[1]),
        ValueError, r"SoftAttention has no categorical alignment to decode",
        "Read its attention weights with `alignment_posterior` instead.",
    ),
    m.Mistake(
        "nuts-non-simplex", m.NAMES, "NUTS on a pair with a discrete alignment",
        lambda: nuts_alignment(MarginalLikelihood(m.region_net()[0]), m.region_net()[1][:1]),
        ValueError, r"nuts_alignment is for continuous alignments; MarginalLikelihood has 'categorical'",
        "Use `alignment_posterior` (the exact posterior) for categorical pairs.",
    ),
    m.Mistake(
        "inference-data-one-sample", m.SIZES, "ArviZ data from a single draw",
        lambda: to_inference_data(MarginalLikelihood(m.region_net()[0]), m.region_net()[1], num_samples=1),
        ValueError, r"num_samples must be >= 2, got 1",
        "Draw at least 2 samples.",
    ),
    m.Mistake(
        "fit-batch-size-zero", m.SIZES, "training with batch size 0",
        lambda: fit(SoftAttention(m.region_net()[0]), [m.region_net()[1]], batch_size=0, progress=False),
        ValueError, r"fit: need num_epochs >= 0, batch_size >= 1, .*got num_epochs=1, batch_size=0",
        "Use batch_size >= 1.",
    ),
    m.Mistake(
        "fit-no-batches", m.SIZES, "training on an empty list of batches (it silently did nothing)",
        lambda: fit(SoftAttention(m.region_net()[0]), [], progress=False),
        ValueError, r"fit: the training data \(list\) holds no batches; nothing to train on",
        "Check that the data loaded (an empty file, a filter that dropped everything).",
    ),
    m.Mistake(
        "fit-warmup-without-guide", m.SIZES, "warm-up steps for a pair without a warm-up guide",
        lambda: fit(SoftAttention(m.region_net()[0]), [m.region_net()[1]], warmup_steps=3, progress=False),
        ValueError, r"fit: warmup_steps=3 but SoftAttention has no warmup_guide",
        "Use warm-up only with pairs that define `warmup_guide` (the Dirichlet pair).",
    ),
    m.Mistake(
        "fit-infinite-lr", m.SIZES, "training with an infinite learning rate (it returned all-NaN weights)",
        lambda: fit(SoftAttention(m.region_net()[0]), [m.region_net()[1]], lr=float("inf"), progress=False),
        ValueError, r"fit: lr must be a learning rate in \(0, 1\] .*got inf",
        "Use a finite learning rate > 0 (1e-3 to 3e-3 is typical).",
    ),
    m.Mistake(
        "fit-lr-out-of-range", m.SIZES, "`fit(..., lr=1e30)`",
        lambda: fit(SoftAttention(m.region_net()[0]), [m.region_net()[1]], lr=1e30, progress=False),
        ValueError, r"fit: lr must be a learning rate in \(0, 1\] .*got 1e\+30",
        "Use a learning rate in (0, 1].",
    ),
    m.Mistake(
        "fit-log-csv-not-writable", m.WRITES, "`fit(log_csv=...)` where the file cannot be made",
        lambda: fit(SoftAttention(m.region_net()[0]), [m.region_net()[1]], progress=False,
                    log_csv=m.work_file("c-file", "x\n") / "log.csv"),
        WriteError, r"cannot write .*c-file/log\.csv: Not a directory \(errno 20\)",
        "Give a path you can write to.",
    ),
    m.Mistake(
        "netcdf-not-writable", m.WRITES, "`save_netcdf(data, path)` (what `pyro-attention inspect --out` calls) where "
        "no folder can be made",
        lambda: save_netcdf(to_inference_data(SoftAttention(m.region_net()[0]), m.region_net()[1], num_samples=4),
                            m.work_file("e-file", "x\n") / "post.nc"),
        WriteError, r"cannot write .*e-file/post\.nc: File exists \(errno 17\): .*e-file is a file, not a folder",
        "Give a path you can write to; an existing file there is left as it was.",
    ),
    m.Mistake(
        "fit-count-not-whole", m.SIZES, "`fit` given an epoch count that is not a whole number (NaN trained nothing, "
        "without a word)",
        lambda: fit(SoftAttention(m.region_net()[0]), [m.region_net()[1]], num_epochs=float("nan"), progress=False),
        TypeError, r"fit: num_epochs must be a whole number \(an int\), got nan \(float\)",
        "Give an int.",
    ),
    m.Mistake(
        "draws-count-not-whole", m.SIZES, "`to_inference_data` (or `nuts_alignment`) given a draw count that is not a "
        "whole number",
        lambda: to_inference_data(MarginalLikelihood(m.region_net()[0]), m.region_net()[1], num_samples=100.0),
        TypeError, r"to_inference_data: num_samples must be a whole number \(an int\), got 100\.0 \(float\)",
        "Give an int.",
    ),
]  # fmt: skip


test_mistake_gets_a_clear_error = m.mistake_test(CATALOGUE)
