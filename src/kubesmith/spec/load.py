"""Load a cluster file: parse, validate types, check semantics; every problem located, all at once."""

from __future__ import annotations

import difflib
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from kubesmith.gcpause import gc_paused
from kubesmith.spec.checks import Finding, flag_findings, semantic_findings
from kubesmith.spec.errors import LocPart, Problem, SpecError, format_path
from kubesmith.spec.model import Cluster
from kubesmith.spec.yamlsource import YamlDocument, parse_yaml
from kubesmith.versions.registry import VersionRegistry, load_registry


@dataclass(frozen=True, slots=True)
class LoadedSpec:
    cluster: Cluster
    document: YamlDocument
    warnings: tuple[Problem, ...]


def load_spec_file(path: str | Path, registry: VersionRegistry | None = None) -> LoadedSpec:
    """Raises SpecError for problems in the file and OSError when it cannot be read."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    return load_spec_text(text, str(path), registry)


def load_spec_text(text: str, filename: str, registry: VersionRegistry | None = None) -> LoadedSpec:
    with gc_paused():
        return _load(text, filename, registry or load_registry())


def _load(text: str, filename: str, registry: VersionRegistry) -> LoadedSpec:
    document, problems = parse_yaml(text, filename)
    if document is None:
        raise SpecError(problems)
    flags = [_located(finding, document) for finding in flag_findings(document.data, registry)]
    try:
        cluster = Cluster.model_validate(document.data)
    except ValidationError as exc:
        raise SpecError(_by_position(problems + _type_problems(exc, document) + flags)) from None
    problems += flags + [_located(finding, document) for finding in semantic_findings(cluster, registry)]
    if any(problem.severity == "error" for problem in problems):
        raise SpecError(_by_position(problems))
    return LoadedSpec(cluster, document, tuple(problems))


def _located(finding: Finding, document: YamlDocument) -> Problem:
    loc, message, severity = finding
    return Problem(format_path(loc), message, document.locate(loc), severity)  # type: ignore[arg-type]


def _by_position(problems: list[Problem]) -> list[Problem]:
    return sorted(problems, key=lambda p: (p.location.line, p.location.column) if p.location else (0, 0))


def _type_problems(exc: ValidationError, document: YamlDocument) -> list[Problem]:
    problems = []
    for error in exc.errors(include_url=False):
        loc: tuple[LocPart, ...] = tuple(error["loc"])
        problems.append(Problem(format_path(loc), _message(error, loc), document.locate(loc)))
    return problems


def _message(error: Any, loc: tuple[LocPart, ...]) -> str:
    kind, message, value = error["type"], error["msg"], error.get("input")
    if kind == "extra_forbidden":
        allowed = _allowed_keys(Cluster, loc[:-1])
        close = difflib.get_close_matches(str(loc[-1]), allowed, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]!r}?" if close else (f"; valid keys: {', '.join(allowed)}" if allowed else "")
        return f"unknown option{hint}"
    if kind == "missing":
        return "required option is missing"
    if kind == "model_type" and not loc:
        return f"the document must be a mapping (a Cluster), got {_type_name(value)}"
    if kind == "value_error":
        return message.removeprefix("Value error, ")
    if kind.endswith("_type") or kind in ("literal_error", "model_type", "dict_type", "list_type"):
        return f"{message}, got {_describe(value)}"
    return message


def _type_name(value: Any) -> str:
    names = {str: "a string", int: "an integer", float: "a number", bool: "a boolean", list: "a list",
             dict: "a mapping", type(None): "nothing (null)"}
    return names.get(type(value), type(value).__name__)


def _describe(value: Any) -> str:
    if isinstance(value, (dict, list)) or value is None:
        return _type_name(value)
    return f"{value!r} ({_type_name(value)})"


def _allowed_keys(model: type[BaseModel], loc: tuple[LocPart, ...]) -> list[str]:
    """Keys accepted at `loc`, for "did you mean" hints."""
    annotation: Any = model
    for part in loc:
        annotation = _unwrap(annotation)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            fields = {(info.alias or name): info.annotation for name, info in annotation.model_fields.items()}
            annotation = fields.get(str(part))
        elif typing.get_origin(annotation) in (list, dict):
            annotation = typing.get_args(annotation)[-1]
        else:
            return []
    annotation = _unwrap(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return sorted(info.alias or name for name, info in annotation.model_fields.items())
    return []


def _unwrap(annotation: Any) -> Any:
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            members = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
            annotation = members[0] if len(members) == 1 else annotation
            if len(members) != 1:
                return annotation
        else:
            return annotation
