"""Load a cluster file: parse, validate types, check semantics; every problem located, all at once."""

from __future__ import annotations

import copy
import difflib
import errno
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from kubesmith import fsutil
from kubesmith.gcpause import gc_paused
from kubesmith.spec.addons import read_addons
from kubesmith.spec.checks import Finding, character_findings, flag_findings, semantic_findings
from kubesmith.vocabulary.errors import Location, LocPart, Problem, SpecError, format_path, yaml_key, yaml_text
from kubesmith.spec.limits import limit_findings
from kubesmith.spec.model import Cluster
from kubesmith.spec.values import value_findings
from kubesmith.spec.yamlsource import YamlDocument, parse_yaml
from kubesmith.versions.registry import VersionRegistry, load_registry


@dataclass(frozen=True, slots=True)
class LoadedSpec:
    cluster: Cluster
    document: YamlDocument
    warnings: tuple[Problem, ...]


MAX_FILE_BYTES = 1 << 20  # a 1,000-host cluster file is about 80 KB


def load_spec_file(path: str | Path, registry: VersionRegistry | None = None) -> LoadedSpec:
    """Raises SpecError for problems in the file and OSError when it cannot be read."""
    path = Path(path)
    text = read_spec_bytes(path).decode("utf-8")
    return load_spec_text(text, str(path), registry)


def read_spec_bytes(path: Path) -> bytes:
    """A regular file of at most MAX_FILE_BYTES: /dev/zero, a FIFO or a directory would hang the
    reader or fill the memory, so they are refused before any byte is read."""
    try:
        return fsutil.read_regular(path, MAX_FILE_BYTES, "a cluster file")
    except OSError as exc:
        if exc.errno != errno.EFBIG:
            raise
    raise SpecError([Problem("(document)", f"the file is larger than {MAX_FILE_BYTES >> 20} MiB; "
                             "a cluster file is far smaller (80 KB for 1,000 hosts)", Location(str(path), 1, 1))])


def load_spec_text(text: str, filename: str, registry: VersionRegistry | None = None) -> LoadedSpec:
    with gc_paused():
        return _load(text, filename, registry or load_registry())


def _load(text: str, filename: str, registry: VersionRegistry) -> LoadedSpec:
    document, problems = parse_yaml(text, filename)
    if document is None:
        raise SpecError(problems)
    characters = [_located(finding, document) for finding in
                  character_findings(document.data) + value_findings(document.data)]
    flags = characters + [_located(finding, document) for finding in flag_findings(document.data, registry)
                          if not _under(finding[0], characters)]
    try:
        cluster = Cluster.model_validate(document.data)
    except ValidationError as exc:
        typed = [problem for problem in _type_problems(exc, document) if not _under_path(problem.path, characters)]
        semantic = [_located(finding, document) for finding in _semantics_of_the_rest(document.data, exc, registry)]
        raise SpecError(_by_position(problems + typed + flags + semantic)) from None
    problems += flags + [_located(finding, document) for finding in semantic_findings(cluster, registry)
                         if not _under(as_written(document.data, finding[0]), characters)]
    problems += [_located(finding, document) for finding in limit_findings(cluster)]
    addons, addon_findings = read_addons(cluster.spec.addons, Path(filename).parent, Path(filename), cluster)
    problems += [_located(finding, document) for finding in addon_findings]
    cluster.spec._addon_manifests = addons  # read with the spec: the plan stays pure
    if any(problem.severity == "error" for problem in problems):
        raise SpecError(_by_position(problems))
    return LoadedSpec(cluster, document, tuple(problems))


def _semantics_of_the_rest(data: Any, exc: ValidationError, registry: VersionRegistry) -> list[Finding]:
    """Semantic findings on every part of the file that parsed, so one run reports every mistake: the
    parts with type errors are dropped (an option's key, else the object or list item holding it) until
    the rest validates; findings touching a dropped part, or a list that lost an item, are left out."""
    rest, dropped = copy.deepcopy(data), []
    for _ in range(6):  # dropping an object can make its parent incomplete in turn
        for error in sorted(exc.errors(include_url=False), key=lambda e: tuple(map(str, e["loc"])), reverse=True):
            if (where := _drop(rest, tuple(error["loc"]))) is None:
                return []
            dropped.append(where)
        try:
            cluster = Cluster.model_validate(rest)
        except ValidationError as again:
            exc = again
            continue
        anchors = [_anchor(where) for where in dropped]
        return [finding for finding in semantic_findings(cluster, registry)
                if not any(_related(finding[0], anchor) for anchor in anchors)]
    return []


def _drop(data: Any, loc: tuple[LocPart, ...]) -> tuple[LocPart, ...] | None:
    """Remove the deepest node of `data` on `loc` (pydantic's loc may go on past the data); None at the root."""
    parents: list[tuple[Any, LocPart]] = []
    node = data
    for part in loc:
        inside = isinstance(node, dict) and part in node or isinstance(node, list) and isinstance(part, int) and \
            0 <= part < len(node)
        if not inside:
            break
        parents.append((node, part))
        node = node[part]
    if not parents:
        return None
    container, key = parents[-1]
    del container[key]
    return tuple(part for _, part in parents)


def _anchor(loc: tuple[LocPart, ...]) -> tuple[LocPart, ...]:
    """A dropped list item shifts the items after it: what touches the list at all is left out."""
    first_index = next((i for i, part in enumerate(loc) if isinstance(part, int)), len(loc))
    return loc[:first_index]


def _related(loc: tuple[LocPart, ...], anchor: tuple[LocPart, ...]) -> bool:
    shorter = min(len(loc), len(anchor))
    return loc[:shorter] == anchor[:shorter]


def _under(loc: tuple[LocPart, ...], refused: list[Problem]) -> bool:
    return _under_path(format_path(loc), refused)


def _under_path(path: str, refused: list[Problem]) -> bool:
    """A value with a control character is reported once, as that: its other problems follow from it."""
    return any(path == problem.path or path.startswith((problem.path + ".", problem.path + "["))
               for problem in refused)


def _located(finding: Finding, document: YamlDocument) -> Problem:
    loc, message, severity = finding
    loc = as_written(document.data, loc)
    return Problem(format_path(loc), message, document.locate(loc), severity)  # type: ignore[arg-type]


def as_written(data: Any, loc: tuple[LocPart, ...]) -> tuple[LocPart, ...]:
    """`loc` with each mapping key as YAML writes it: pydantic's paths hold an integer key as an int, which
    would print as a list position (`data[9000]`) and never be found in the file."""
    parts: list[LocPart] = []
    node = data
    for part in loc:
        # (a null key: pydantic's path holds it as the text 'None')
        odd = next((key for key in node if key is None and part == "None"), ...) if isinstance(node, dict) else ...
        if odd is None or isinstance(node, dict) and not isinstance(part, str) and part in node:
            key = odd if odd is None else next(key for key in node if key == part)
            parts.append(yaml_key(key))
            node = node[key]
            continue
        parts.append(part)
        if isinstance(node, dict) and isinstance(part, str):
            node = node.get(part)
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        else:
            node = None
    return tuple(parts)


def _by_position(problems: list[Problem]) -> list[Problem]:
    return sorted(problems, key=lambda p: (p.location.line, p.location.column) if p.location else (0, 0))


def _type_problems(exc: ValidationError, document: YamlDocument) -> list[Problem]:
    problems = []
    for error in exc.errors(include_url=False):
        loc: tuple[LocPart, ...] = as_written(document.data, tuple(error["loc"]))
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
    return f"{yaml_text(value)} ({_type_name(value)})"


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
