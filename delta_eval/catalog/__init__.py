"""Per-model capabilities and prices, from a dated snapshot of a maintained catalogue shipped in the wheel.

Example:
    >>> from delta_eval.catalog import model_info
    >>> model_info("gemini:gemini-2.5-pro").budget_min
    128
"""

from delta_eval.catalog.info import EFFORT_ORDER, Effort, ModelInfo, ModelOverride, Price
from delta_eval.catalog.lookup import CATALOG_AS_OF, CATALOG_SOURCE, catalog, catalog_key, model_info

__all__ = [
    "CATALOG_AS_OF",
    "CATALOG_SOURCE",
    "EFFORT_ORDER",
    "Effort",
    "ModelInfo",
    "ModelOverride",
    "Price",
    "catalog",
    "catalog_key",
    "model_info",
]
