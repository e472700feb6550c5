"""The one place that knows which ArviZ generation is installed.

ArviZ 1.0 (Python >= 3.12) split ArviZ into ``arviz-base``, ``arviz-stats`` and ``arviz-plots`` and replaced
``InferenceData`` with xarray's ``DataTree`` [1].  What the package does with ArviZ differs between the two
generations in exactly the calls below; everything else (``data.posterior["weights"]``, ``"khat" in
data.sample_stats``, ``group.attrs``, ``az.summary(data)``'s ``mean`` / ``sd`` / ``ess_bulk`` / ``r_hat`` columns)
reads the same on both, so no other module imports ``arviz``.

==================  ==========================================  ==============================================
                    ArviZ 0.2x (``InferenceData``)               ArviZ >= 1 (``xarray.DataTree``)
==================  ==========================================  ==============================================
build               ``az.from_dict(posterior=..., prior=...)``  ``az.from_dict({"posterior": ..., ...})``
group names         ``data.groups()``                           ``list(data.children)``
add a group         ``data.add_groups({name: dataset})``        ``data[name] = dataset``
write / read        ``data.to_netcdf(path)`` / ``from_netcdf``   ``data.to_netcdf(path, engine="h5netcdf")`` /
                                                                ``az.from_netcdf`` (``xarray.open_datatree``)
PSIS k-hat          ``az.psislw(log_w)``                        ``arviz_stats`` ``psislw(-log_w)`` (it takes a
                                                                log-likelihood: log ratios are its negative)
k-hat figure        ``az.plot_khat(array, ax=ax)``              ``az.plot_khat(elpd_data)`` (a ``pareto_k``
                                                                DataArray), a ``PlotCollection``
density figure      ``az.plot_posterior`` (axes)                ``az.plot_dist`` (a ``PlotCollection``)
forest figure       ``az.plot_forest`` (axes)                   ``az.plot_forest`` (a ``PlotCollection``)
intervals           94 % HDI (``hdi_3%``, ``hdi_97%``)          89 % ETI (``eti89_lb``, ``eti89_ub``)
==================  ==========================================  ==============================================

Every figure function here returns a matplotlib ``Figure`` on both generations.

References:
[1] ArviZ migration guide, docs/source/user_guide/migration_guide.md in arviz-devs/arviz.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from importlib.metadata import version
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import xarray as xr

from pyro_attention.files import writing

#: ArviZ's major version: 0 (``InferenceData``, Python 3.10 / 3.11) or 1 (``xarray.DataTree``, Python >= 3.12)
GENERATION = 0 if int(version("arviz").split(".")[0]) < 1 else 1

#: what :func:`from_dict` and :func:`load_netcdf` return: ``arviz.InferenceData`` (0.2x) or ``xarray.DataTree``
ArvizData = Any

#: the NetCDF engine both generations write and read with (``h5netcdf``: groups, strings, no C library)
ENGINE = "h5netcdf"


def arviz() -> ModuleType:
    """``import arviz``, without ArviZ 0.2x's import-time ``FutureWarning`` about its coming refactor (that
    refactor is ArviZ 1.x, which this module also supports)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning, module="arviz")
        import arviz as az
    return az


def from_dict(
    groups: Mapping[str, Mapping[str, np.ndarray] | None],
    coords: Mapping[str, Any],
    dims: Mapping[str, Sequence[str]],
) -> ArvizData:
    """ArviZ data from ``{group: {variable: array}}``; ``None`` or empty groups are left out.

    Groups whose name contains ``data`` (``observed_data``, ``constant_data``) have no ``(chain, draw)``
    dimensions; every other group's arrays start with them.
    """
    az = arviz()
    present = {name: dict(variables) for name, variables in groups.items() if variables}
    dims = {k: list(v) for k, v in dims.items()}  # a copy: ArviZ may keep it
    if GENERATION == 0:
        return az.from_dict(**present, coords=dict(coords), dims=dims)
    return az.from_dict(present, coords=dict(coords), dims=dims)


def group_names(data: ArvizData) -> list[str]:
    """The top-level group names (``posterior``, ``sample_stats``, ...)."""
    return list(data.groups()) if GENERATION == 0 else list(data.children)


def group(data: ArvizData, name: str) -> xr.Dataset:
    """Group ``name`` as an ``xarray.Dataset`` (a view on ArviZ 1.x's ``DataTree`` node)."""
    if name not in group_names(data):
        raise KeyError(f"no group {name!r}; the groups are {group_names(data)}")
    return getattr(data, name) if GENERATION == 0 else data[name].dataset


def set_group(data: ArvizData, name: str, dataset: xr.Dataset) -> None:
    """Add group ``name``, or replace it, with ``dataset`` (its attributes kept)."""
    if GENERATION == 1:
        data[name] = dataset
    elif name in data.groups():
        setattr(data, name, dataset)
    else:
        with warnings.catch_warnings():  # "not defined in the InferenceData scheme": a group of our own
            warnings.simplefilter("ignore", UserWarning)
            data.add_groups({name: dataset})


def update_group(data: ArvizData, name: str, variables: xr.Dataset | Mapping[str, Any]) -> None:
    """Add ``variables`` (a ``Dataset``, or ``Dataset.assign``'s mapping) to group ``name``, creating it if
    absent."""
    if name in group_names(data):
        set_group(data, name, group(data, name).assign(variables))
    else:
        set_group(data, name, variables if isinstance(variables, xr.Dataset) else xr.Dataset(variables))


def update_attrs(data: ArvizData, attrs: Mapping[str, Any]) -> None:
    """Add ``attrs`` to the attributes of every group."""
    for name in group_names(data):
        (getattr(data, name) if GENERATION == 0 else data[name]).attrs.update(attrs)


def save_netcdf(data: ArvizData, path: str | Path) -> Path:
    """Write ``data`` to ``path`` (NetCDF-4, one HDF5 group per ArviZ group) atomically: a failure leaves an
    existing file as it was and raises a :class:`~pyro_attention.files.WriteError` naming ``path``."""
    if not hasattr(data, "to_netcdf"):
        raise TypeError(f"save_netcdf: data must be ArviZ data (to_inference_data's result), got {type(data).__name__}")
    path = Path(path)
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # same folder: the rename is atomic
        try:
            data.to_netcdf(tmp, engine=ENGINE)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
    return path


def load_netcdf(path: str | Path) -> ArvizData:
    """Read a file written by :func:`save_netcdf` (or by ArviZ itself), loaded into memory.

    :raises FileNotFoundError: naming ``path`` if there is no such file.
    :raises ValueError: naming ``path`` if it is not a NetCDF-4 file.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"load_netcdf: no such file: {path}")
    try:
        tree = arviz().from_netcdf(str(path), engine=ENGINE)
    except OSError as error:  # h5py: "file signature not found", a truncated file, ...
        raise ValueError(f"load_netcdf: {path} is not a NetCDF-4 file written by save_netcdf or ArviZ ({error})") \
            from None
    if GENERATION == 0:
        return tree  # InferenceData reads eagerly
    try:
        return tree.load()
    finally:
        tree.close()


#: fewest draws with a tail to fit: ArviZ 1.x fits the largest floor(n / 5) weights (n <= 225) and needs 5 of them
MIN_PSIS_DRAWS = 25
#: a tail whose log weights span less than this is tied (weights equal to 1e-9): no Pareto shape to fit
TIED_TAIL = 1e-9


def psis_khat(log_weights: np.ndarray) -> np.ndarray:
    """Pareto k-hat of importance weights ``w ∝ exp(log_weights)``, one per row of ``(n, draws)``.

    ``nan`` where there is no tail to fit: fewer than :data:`MIN_PSIS_DRAWS` draws, or a row whose tail weights
    (the largest ``floor(draws / 5)``, or ``floor(3 sqrt(draws))`` beyond 225 draws) are equal (their log weights
    within :data:`TIED_TAIL`).  ``inf`` where a tail that is not tied cannot be fitted because a few weights
    dominate (ArviZ 0.2x says ``inf`` there, 1.x ``nan``; their numpy warnings are not passed on): the least
    reliable case.
    """
    log_weights = np.atleast_2d(np.asarray(log_weights, dtype=np.float64))
    khat = np.full(log_weights.shape[0], np.nan)
    draws = log_weights.shape[-1]
    if draws < MIN_PSIS_DRAWS:
        return khat
    in_tail = int(np.floor(3 * draws**0.5)) if draws > 225 else draws // 5
    tail = np.sort(log_weights, axis=-1)[:, -in_tail:]
    fit = tail.max(-1) - tail.min(-1) > TIED_TAIL
    if not fit.any():
        return khat
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)  # a degenerate fit, said as inf below
        if GENERATION == 0:
            fitted = arviz().psislw(log_weights[fit].copy())[1]
        else:
            from arviz_stats.base import array_stats

            # arviz-stats smooths a log-likelihood: its log ratios are the negative of what it is given
            fitted = array_stats.psislw(-log_weights[fit], axis=-1)[1]
    khat[fit] = np.where(np.isfinite(fitted), fitted, np.inf)
    return khat


def _figure(plotted: Any) -> Any:
    """The matplotlib ``Figure`` of what a plot function returned (axes on 0.2x, a ``PlotCollection`` on 1.x)."""
    if GENERATION == 1:
        return plotted.viz["figure"].item()
    return np.ravel(plotted)[0].get_figure()


def khat_axes(khat: np.ndarray, threshold: float, figsize: tuple[float, float]) -> Any:
    """ArviZ's k-hat scatter of ``khat`` (one value per example, all finite) on a new figure; returns its axes."""
    import matplotlib.pyplot as plt

    az = arviz()
    values = np.asarray(khat, dtype=np.float64).ravel()
    if GENERATION == 0:
        _, ax = plt.subplots(figsize=figsize)
        with warnings.catch_warnings():  # ArviZ's FutureWarning about DataArray input; a plain array is given
            warnings.simplefilter("ignore", FutureWarning)
            az.plot_khat(values, ax=ax, show_hlines=False)
        return ax
    from arviz_stats.utils import ELPDData

    pareto_k = xr.DataArray(values, dims=["example"], coords={"example": np.arange(values.size)})
    # only the Pareto k's are plotted; there is no ELPD behind them (nan), they are k-hat of q, not of LOO
    k_only = ELPDData(elpd=np.nan, se=np.nan, p=np.nan, n_samples=0, n_data_points=values.size, scale="log",
                      warning=False, good_k=threshold, pareto_k=pareto_k)
    plotted = az.plot_khat(k_only, hline_values=[], figure_kwargs={"figsize": figsize})
    return plotted.viz["plot"].item()


def density_figure(data: ArvizData, var_names: Sequence[str] | None = None,
                   coords: Mapping[str, Any] | None = None) -> Any:
    """One density panel per cell of the posterior draws selected by ``coords``: ``az.plot_posterior`` on
    ArviZ 0.2x, ``az.plot_dist`` on 1.x.  Returns the ``Figure``."""
    az = arviz()
    if GENERATION == 0:
        return _figure(az.plot_posterior(data, var_names=var_names, coords=coords))
    return _figure(az.plot_dist(data, var_names=var_names, coords=coords))


def forest_figure(data: ArvizData, var_names: Sequence[str] | None = None,
                  coords: Mapping[str, Any] | None = None) -> Any:
    """``az.plot_forest`` of the posterior draws selected by ``coords``, chains combined; returns the ``Figure``."""
    return _figure(arviz().plot_forest(data, var_names=var_names, coords=coords, combined=True))


def summary(data: ArvizData, var_names: Sequence[str] | None = None) -> Any:
    """``az.summary`` (a pandas ``DataFrame``): ``mean``, ``sd``, ``ess_bulk``, ``ess_tail`` and ``r_hat`` on both
    generations, intervals as each generation's default (see the module table)."""
    return arviz().summary(data, var_names=None if var_names is None else list(var_names))
