"""The second stage: stratified sampling of conversations, in DuckDB SQL, with the weights that reweight estimates
to the population.

The source is read once into a small population table (ids, metadata, strata; never messages), the sample is drawn
from it in SQL, and the drawn conversations are read again in one pass.
"""

from delta_eval.sampling.plan import SamplePlan, sample_source
from delta_eval.sampling.population import build_population, iter_selected
from delta_eval.sampling.stratified import SampleResult, Stratified, allocate, draw_sample

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
