"""Quoting for the few places a user's string becomes part of a SQL statement.

Values are bound as parameters wherever DuckDB takes them; where it cannot (a name, a ``CREATE VIEW`` whose text is
kept), the string is quoted here, and only here, so one rule decides what is safe.

Example:
    >>> quote_ident('tier"; DROP TABLE x; --')
    '"tier""; DROP TABLE x; --"'
    >>> quote_literal("O'Brien")
    "'O''Brien'"
"""

from __future__ import annotations

__all__ = ["quote_ident", "quote_literal"]


def quote_ident(name: str) -> str:
    """``name`` as a SQL identifier (a column or table): in double quotes, inner double quotes doubled, so that no
    name, whatever its characters, ends the identifier early."""
    if "\x00" in name:
        # A NUL would end the statement's text in C code below DuckDB's parser: no column can have such a name.
        raise ValueError(f"a name with a NUL character cannot be a SQL identifier: {name!r}")
    return '"' + name.replace('"', '""') + '"'


def quote_literal(value: str) -> str:
    """``value`` as a SQL string literal (for statements that cannot take bound parameters, such as a view's
    definition): in single quotes, inner single quotes doubled."""
    if "\x00" in value:
        raise ValueError(f"a string with a NUL character cannot be a SQL literal: {value!r}")
    return "'" + value.replace("'", "''") + "'"
