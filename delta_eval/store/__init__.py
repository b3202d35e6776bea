"""The run folder: Parquet datasets written in atomic batches, the typed manifest, the response cache, the
session's start and end, and DuckDB views over it all. The store knows nothing of providers.
"""
