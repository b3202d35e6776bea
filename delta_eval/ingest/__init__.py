"""Readers that turn a production export into canonical conversations: JSON, JSONL, Parquet, a DuckDB query."""

from delta_eval.ingest.mapping import FieldMapping, get_path
from delta_eval.ingest.openai_chat import parse_messages, parse_tools
from delta_eval.ingest.source import (
    ConversationSource,
    load_tools,
    read_conversations,
    read_conversations_sql,
)

__all__ = [
    "ConversationSource",
    "FieldMapping",
    "get_path",
    "load_tools",
    "parse_messages",
    "parse_tools",
    "read_conversations",
    "read_conversations_sql",
]
