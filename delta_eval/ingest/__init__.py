"""The first stage: read a production export into canonical conversations.

Readers for JSON, JSONL (optionally gzipped), Parquet and any DuckDB query yield records; the source maps each
through its :class:`~delta_eval.mapping.FieldMapping` and validates it (:mod:`delta_eval.chat_format`, or for a
provider's native request bodies, ``message_format``, the readers of :mod:`delta_eval.ingest.native`). A bad record
becomes a :class:`~delta_eval.exceptions.RecordError` naming the source, the record and the field, never a crash.
"""

from delta_eval.ingest.source import ConversationSource, open_source, read_conversations, read_conversations_sql

__all__ = ["ConversationSource", "open_source", "read_conversations", "read_conversations_sql"]
