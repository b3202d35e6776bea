"""The second stage: stratified sampling of conversations, in DuckDB SQL, with the weights that reweight estimates
to the population.

The source is read once into a small population table (ids, metadata, strata; never messages), the sample is drawn
from it in SQL, and the drawn conversations are read again in one pass.

The names are imported on first use (see :mod:`delta_eval.lazy`): a run's configuration holds a
:class:`Stratified` and loads without the data engines the sampling itself runs on.
"""

import pkgutil as _pkgutil
import typing as _typing

from delta_eval.lazy import lazy_names as _lazy_names

if _typing.TYPE_CHECKING:
    from delta_eval.sampling.plan import SamplePlan, sample_source
    from delta_eval.sampling.population import build_population, iter_selected
    from delta_eval.sampling.stratified import SampleResult, Stratified, allocate, draw_sample

_EXPORTS = {
    "delta_eval.sampling.plan": ("SamplePlan", "sample_source"),
    "delta_eval.sampling.population": ("build_population", "iter_selected"),
    "delta_eval.sampling.stratified": ("SampleResult", "Stratified", "allocate", "draw_sample"),
}
if not _typing.TYPE_CHECKING:  # hidden from type checkers, so that a misspelt name stays an error for them
    # every module of the package answers as an attribute too (``delta_eval.metrics.gates``), as it did when the
    # package imported them all
    __getattr__, __dir__ = _lazy_names(__name__, _EXPORTS, tuple(m.name for m in _pkgutil.iter_modules(__path__)))

__all__ = [
    "SamplePlan",
    "SampleResult",
    "Stratified",
    "allocate",
    "build_population",
    "draw_sample",
    "iter_selected",
    "sample_source",
]
