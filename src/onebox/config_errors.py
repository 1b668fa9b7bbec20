"""A bad ``ONEBOX_*`` value as one line per setting: ``ONEBOX_X: <why>; expected <form>``.

Pure: :func:`onebox.config.load_settings` passes the settings model, the error and the
environment it read, and raises the lines as a ConfigError instead of pydantic's dump.
"""

from __future__ import annotations

import inspect
import json
import types
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import annotated_types
from pydantic import BaseModel, SecretStr
from pydantic import ValidationError as PydanticValidationError
from pydantic.fields import FieldInfo

PREFIX = "ONEBOX_"
DELIMITER = "__"
SECRET_WORDS = ("KEY", "SECRET", "PASSWORD", "TOKEN", "DATABASE_URL")  # values never echoed
MAX_SHOWN_CHARS = 80
UNKNOWN_FORM = "the form docs/configuration.md gives"


def describe(exc: PydanticValidationError, model: type[BaseModel],
             environ: Mapping[str, str]) -> str:
    """One line per bad setting (several errors of one variable make one line)."""
    lines: dict[str, str] = {}
    for error in exc.errors():
        var, inner, field = _variable(error["loc"], model)
        var = _set_alias(var, field, environ)
        lines.setdefault(var, _line(var, inner, field, error, environ))
    return "\n".join(lines.values())


def describe_unparsed(model: type[BaseModel], environ: Mapping[str, str]) -> str | None:
    """The lines for variables whose value must be JSON (a list, an object, a group of
    settings) and is not; None when every such value parses."""
    lines = []
    for var, value in sorted(_ours(environ).items()):
        field = _field_at(model, var[len(PREFIX):].lower().split(DELIMITER))
        if field is None or not (_is_json_valued(field) or _is_model(_unwrap(field.annotation))):
            continue
        try:
            json.loads(value)
        except ValueError:
            lines.append(f"{var}: {_shown(var, value)}is not JSON; expected {form(field)}")
    return "\n".join(lines) or None


def form(field: FieldInfo | None) -> str:
    """What a setting's value looks like in its environment variable."""
    if field is None:
        return UNKNOWN_FORM
    extra = field.json_schema_extra
    if isinstance(extra, dict) and isinstance(extra.get("form"), str):
        return str(extra["form"])
    kind = _unwrap(field.annotation)
    origin = get_origin(kind)
    if origin in (list, tuple, set, frozenset, Sequence):
        return "a JSON list" + _example(field)
    if origin is dict or kind is dict or _is_model(kind):
        return "a JSON object" + _example(field)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(kind))
    if kind is bool:
        return "true or false"
    if kind in (int, float):
        return ("a whole number" if kind is int else "a number") + _bounds(field)
    if kind is Path:
        return "a path"
    if kind in (str, SecretStr):
        return "text"
    return UNKNOWN_FORM


def _line(var: str, inner: str, field: FieldInfo | None, error: Mapping[str, Any],
          environ: Mapping[str, str]) -> str:
    why = str(error.get("msg") or "invalid").removeprefix("Value error, ")
    if error.get("type") == "extra_forbidden":
        return f"{var}: no such setting; expected one of the settings docs/configuration.md lists"
    if field is not None and _is_model(_unwrap(field.annotation)) and not inner:
        return f"{var}: {why}"  # a check across the group's fields
    if error.get("type") == "missing" and inner:
        return f"{var}: {inner} is missing; expected {form(field)}"
    where = f"{inner}: " if inner else ""
    value = _value_of(var, environ)
    shown = (_shown(var, value) if value is not None else "") or "the value "
    return f"{var}: {where}{shown}is not valid ({_lower_first(why)}); expected {form(field)}"


def _variable(loc: Sequence[int | str], model: type[BaseModel]
              ) -> tuple[str, str, FieldInfo | None]:
    """The variable a pydantic error location comes from, the path inside its (JSON)
    value, and the field that variable sets."""
    names: list[str] = []
    current: type[BaseModel] | None = model
    field: FieldInfo | None = None
    rest = list(loc)
    while rest and current is not None and isinstance(rest[0], str):
        part = str(rest.pop(0))
        field = current.model_fields.get(part)
        if field is None and not names and part.isupper():  # read under an alias
            return part, _inner(rest), _aliased(current, part)
        names.append(part)
        if field is None:
            break
        kind = _unwrap(field.annotation)
        current = kind if _is_model(kind) else None
    return PREFIX + DELIMITER.join(n.upper() for n in names), _inner(rest), field


def _aliased(model: type[BaseModel], alias: str) -> FieldInfo | None:
    """The field read from the variable ``alias`` (``DATABASE_URL``)."""
    for field in model.model_fields.values():
        choices = getattr(field.validation_alias, "choices", ())
        if alias in choices:
            return field
    return None


def _set_alias(var: str, field: FieldInfo | None, environ: Mapping[str, str]) -> str:
    """Of a field's alias variables (ONEBOX_DATABASE_URL, DATABASE_URL), the one set."""
    choices = [c for c in getattr(field and field.validation_alias, "choices", ())
               if isinstance(c, str) and c.isupper()]
    ours = {k.upper() for k in environ}
    return next((c for c in choices if c in ours), var) if var in choices else var


def _inner(rest: Sequence[int | str]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in rest).lstrip(".")


def _field_at(model: type[BaseModel], path: Sequence[str]) -> FieldInfo | None:
    current: type[BaseModel] | None = model
    field = None
    for part in path:
        if current is None or part not in current.model_fields:
            return None
        field = current.model_fields[part]
        kind = _unwrap(field.annotation)
        current = kind if _is_model(kind) else None
    return field


def _is_json_valued(field: FieldInfo) -> bool:
    """Settings pydantic-settings reads as JSON: lists, mappings and lists of groups."""
    kind = _unwrap(field.annotation)
    return get_origin(kind) in (list, tuple, set, frozenset, dict) or kind is dict


def _is_model(kind: Any) -> bool:
    return inspect.isclass(kind) and issubclass(kind, BaseModel)


def _unwrap(kind: Any) -> Any:
    """``X | None`` -> X."""
    if get_origin(kind) in (Union, types.UnionType):
        args = [a for a in get_args(kind) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return kind


def _example(field: FieldInfo) -> str:
    if not field.examples:
        return ""
    return f", e.g. '{json.dumps(field.examples[0])}'"


def _bounds(field: FieldInfo) -> str:
    words = ((annotated_types.Ge, "ge", ">="), (annotated_types.Gt, "gt", ">"),
             (annotated_types.Le, "le", "<="), (annotated_types.Lt, "lt", "<"))
    found = []
    for item in field.metadata:
        for kind, attr, sign in words:
            if isinstance(item, kind):
                found.append(f"{sign} {getattr(item, attr)}")
    return f" ({', '.join(found)})" if found else ""


def _ours(environ: Mapping[str, str]) -> dict[str, str]:
    return {k.upper(): v for k, v in environ.items() if k.upper().startswith(PREFIX)}


def _value_of(var: str, environ: Mapping[str, str]) -> str | None:
    return _ours(environ).get(var.upper())


def _shown(var: str, value: str) -> str:
    if any(word in var for word in SECRET_WORDS):
        return ""
    text = value if len(value) <= MAX_SHOWN_CHARS else value[:MAX_SHOWN_CHARS] + "..."
    return f"{text!r} "


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]
