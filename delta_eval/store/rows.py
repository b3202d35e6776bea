"""Stored rows derived from the schema types: one pydantic model gives a dataset its Arrow schema, its row
conversion and the way back, so the three never drift apart.

A :class:`Table` maps each field of its model to columns:

- ``str``, ``int``, ``float``, ``bool``, ``Literal`` and ``datetime`` to the matching Arrow type (nullable where the
  field is optional); tuples and lists to Arrow lists; nested models to structs;
- ``dict`` and ``Any`` values (metadata, raw judge answers) to JSON text, as are the fields named in ``as_json``;
- nested models named in ``flatten`` to their own fields as top-level columns, with a prefix (``usage`` gives
  ``input_tokens``, ``output_tokens``, ...), so that SQL over a run reads ``sum(cost_usd)``, not ``usage.cost``;
  an optional nested model that is ``None`` (unknown usage) gives nulls in all its columns, and reads back as ``None``;
- ``computed`` adds columns derived from the object (``n_tool_calls``), written but never read back.

Example:
    >>> from delta_eval.schema import Usage
    >>> Table(Usage).schema.names
    ['input_tokens', 'cached_input_tokens', 'cache_write_tokens', 'output_tokens', 'reasoning_tokens']
"""

from __future__ import annotations

import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, Literal, TypeVar, Union, get_args, get_origin

import pyarrow as pa
from pydantic import BaseModel, TypeAdapter

from delta_eval.schema import ToolCall

__all__ = ["Computed", "Table"]

M = TypeVar("M", bound=BaseModel)
_Convert = Callable[[Any], Any]


@dataclass(frozen=True)
class Computed:
    """A column derived from the object: written, never read back."""

    type: pa.DataType
    value: Callable[[Any], Any]


#: Columns computed inside nested structs, by model (a tool call says whether its arguments parse).
NESTED_COMPUTED: dict[type[BaseModel], dict[str, Computed]] = {
    ToolCall: {"arguments_valid": Computed(pa.bool_(), lambda call: call.arguments_valid)},
}

_SCALARS: dict[Any, pa.DataType] = {
    str: pa.string(),
    int: pa.int64(),
    float: pa.float64(),
    bool: pa.bool_(),
    datetime: pa.timestamp("us", tz="UTC"),
}


def _identity(value: Any) -> Any:
    return value


def _as_json(annotation: Any) -> tuple[pa.DataType, _Convert, _Convert]:
    adapter: TypeAdapter[Any] = TypeAdapter(annotation)

    def dump(value: Any) -> Any:
        if value is None:
            return None
        # Defaults left out keep stored messages as compact as the exports they came from.
        return adapter.dump_json(value, exclude_defaults=True, fallback=str).decode("utf-8")

    def load(value: Any) -> Any:
        return None if value is None else adapter.validate_json(value)

    return pa.string(), dump, load


def _compile(annotation: Any) -> tuple[pa.DataType, _Convert, _Convert]:
    """The Arrow type of a field, and its conversions to and from the stored value."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin in (Union, types.UnionType):
        present = [a for a in args if a is not type(None)]
        if len(present) == 1:
            arrow, dump, load = _compile(present[0])
            return arrow, (lambda v: None if v is None else dump(v)), (lambda v: None if v is None else load(v))
        return _as_json(annotation)
    if origin is Literal:
        kinds = {type(a) for a in args}
        return (_SCALARS[kinds.pop()] if len(kinds) == 1 else pa.string()), _identity, _identity
    if annotation in _SCALARS:
        return _SCALARS[annotation], _identity, _identity
    if origin in (tuple, list) and args and (len(args) == 1 or args[1] is Ellipsis):
        inner, dump, load = _compile(args[0])
        container = tuple if origin is tuple else list
        return pa.list_(inner), (lambda v: [dump(x) for x in v]), (lambda v: container(load(x) for x in v or ()))
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return _struct(annotation)
    return _as_json(annotation)


def _struct(model: type[BaseModel]) -> tuple[pa.DataType, _Convert, _Convert]:
    parts = {name: _compile(info.annotation) for name, info in model.model_fields.items()}
    computed = NESTED_COMPUTED.get(model, {})
    arrow = pa.struct(
        [pa.field(name, t) for name, (t, _, _) in parts.items()] + [pa.field(n, c.type) for n, c in computed.items()]
    )

    def dump(obj: Any) -> dict[str, Any]:
        row = {name: to(getattr(obj, name)) for name, (_, to, _) in parts.items()}
        row.update({name: c.value(obj) for name, c in computed.items()})
        return row

    def load(row: Mapping[str, Any]) -> Any:
        return model.model_validate({name: back(row[name]) for name, (_, _, back) in parts.items() if name in row})

    return arrow, dump, load


@dataclass(frozen=True)
class _Column:
    name: str
    type: pa.DataType
    dump: _Convert  # from the object to the stored value
    path: tuple[str, ...] | None  # the field (and nested field, when flattened) it stores; None when computed
    load: _Convert = _identity


class Table(Generic[M]):
    """A run-folder dataset whose rows are instances of ``model``.

    Example:
        >>> from delta_eval.schema import Verdict
        >>> verdicts = Table(Verdict, flatten={"judge_usage": "judge_"})
        >>> v = Verdict(pair_id="c#0", conversation_id="c", turn_index=0, stage="judge", outcome="tie")
        >>> verdicts.row(v)["judge_input_tokens"], verdicts.parse(verdicts.row(v)) == v
        (0, True)
    """

    def __init__(
        self,
        model: type[M],
        *,
        flatten: Mapping[str, str] | None = None,
        as_json: tuple[str, ...] = (),
        computed: Mapping[str, Computed] | None = None,
        no_statistics: tuple[str, ...] = (),
    ) -> None:
        self.model = model
        #: Columns written without Parquet min/max statistics: large values (media bytes) that no reader filters on,
        #: which the statistics would copy into the file's metadata twice more.
        self.no_statistics = no_statistics
        self._flatten = dict(flatten or {})
        columns: list[_Column] = []
        self._optional: set[str] = set()
        for name, info in model.model_fields.items():
            nested = info.annotation
            if name in self._flatten:
                present = [a for a in get_args(nested) if a is not type(None)]
                if get_origin(nested) in (Union, types.UnionType) and len(present) == 1:
                    # An optional model (usage that may be unknown): every column null when it is None.
                    self._optional.add(name)
                    nested = present[0]
                assert isinstance(nested, type) and issubclass(nested, BaseModel), name
                for sub, sub_info in nested.model_fields.items():
                    arrow, dump, load = _compile(sub_info.annotation)
                    columns.append(_Column(self._flatten[name] + sub, arrow, dump, (name, sub), load))
                continue
            arrow, dump, load = _as_json(nested) if name in as_json else _compile(nested)
            columns.append(_Column(name, arrow, dump, (name,), load))
        for name, c in (computed or {}).items():
            columns.append(_Column(name, c.type, c.value, None))
        self._columns = columns
        self.schema = pa.schema([pa.field(c.name, c.type) for c in columns])

    def row(self, obj: M) -> dict[str, Any]:
        """The stored row of ``obj``."""
        out: dict[str, Any] = {}
        for c in self._columns:
            if c.path is None:
                out[c.name] = c.dump(obj)
                continue
            value: Any = obj
            for part in c.path:
                value = getattr(value, part) if value is not None else None
            out[c.name] = None if value is None else c.dump(value)
        return out

    def parse(self, row: Mapping[str, Any]) -> M:
        """The object a stored row holds (computed columns are ignored)."""
        data: dict[str, Any] = {}
        for c in self._columns:
            if c.path is None or c.name not in row:
                continue
            if len(c.path) == 1:
                data[c.path[0]] = c.load(row[c.name])
            else:
                data.setdefault(c.path[0], {})[c.path[1]] = c.load(row[c.name])
        for name in self._optional:
            if name in data and all(v is None for v in data[name].values()):
                data[name] = None
        return self.model.model_validate(data)

    def to_arrow(self, objs: list[M]) -> pa.Table:
        """Rows of ``objs`` as an Arrow table with this dataset's schema."""
        return pa.Table.from_pylist([self.row(o) for o in objs], schema=self.schema)
