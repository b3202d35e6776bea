"""Stratified sampling of conversations in DuckDB SQL, with the weights that reweight estimates to the population."""

from delta_eval.sampling.population import build_population, iter_selected
from delta_eval.sampling.stratified import SampleResult, Stratified, StratumRow, allocate, draw_sample

__all__ = [
    "SampleResult",
    "Stratified",
    "StratumRow",
    "allocate",
    "build_population",
    "draw_sample",
    "iter_selected",
]
