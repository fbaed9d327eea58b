"""Documentation of every option (the NixOS options manual is the model): path, type, default, description."""

from __future__ import annotations

import json
import types
import typing
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, WithJsonSchema
from pydantic_core import PydanticUndefined

from kubesmith.spec.model import Cluster


@dataclass(frozen=True, slots=True)
class OptionDoc:
    path: str
    type: str
    default: str  # JSON text, "derived: ..." or "required"
    description: str


def option_docs(model: type[BaseModel] = Cluster, prefix: str = "") -> list[OptionDoc]:
    docs: list[OptionDoc] = []
    for name, info in model.model_fields.items():
        path = f"{prefix}{info.alias or name}"
        nested = _nested_model(info.annotation)
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        if nested is None or _is_list(info.annotation):  # a list of objects is an option itself
            docs.append(OptionDoc(path, _type_name(info.annotation), _default(info, extra), info.description or ""))
        if nested is not None:
            docs += option_docs(nested, f"{path}[]." if _is_list(info.annotation) else f"{path}.")
    return docs


def _default(info: Any, extra: dict[str, Any]) -> str:
    if "x-derived-from" in extra:
        return f"derived: {extra['x-derived-from']}"
    if info.default is PydanticUndefined and info.default_factory is None:
        return "required"
    value = info.default if info.default_factory is None else None
    return json.dumps(value)


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    for candidate in (annotation, *typing.get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _is_list(annotation: Any) -> bool:
    inner = typing.get_args(annotation)[0] if typing.get_origin(annotation) is typing.Annotated else annotation
    return typing.get_origin(inner) is list


def _type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        schema = next((meta.json_schema for meta in args[1:] if isinstance(meta, WithJsonSchema)), None)
        if schema and isinstance(schema.get("type"), list):  # e.g. flag values: string, integer or boolean
            return _one_of_types(schema["type"])
        return _type_name(args[0])
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(arg) for arg in args)
    if origin is typing.Literal:
        return "one of " + ", ".join(json.dumps(arg) for arg in args)
    if origin is list:
        return f"list of {_type_name(args[0])}"
    if origin is dict:
        return f"mapping of {_type_name(args[0])} to {_type_name(args[1])}"
    if annotation is type(None):
        return "null"
    if annotation is typing.Any:
        return "any value"
    names = {str: "string", int: "integer", float: "number", bool: "boolean"}
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "object"
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _one_of_types(names: list[str]) -> str:
    return ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else names[0]


def options_markdown(docs: list[OptionDoc]) -> str:
    lines = ["# kubesmith options", ""]
    for doc in docs:
        lines += [f"## `{doc.path}`", "", doc.description, "", f"- type: {doc.type}", f"- default: `{doc.default}`", ""]
    return "\n".join(lines)
