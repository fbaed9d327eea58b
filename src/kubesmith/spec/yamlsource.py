"""YAML with positions: libyaml parses, the node tree answers "where is this option?".

PyYAML's loader drops positions and silently keeps the last of duplicate keys, so we
compose the node tree ourselves, report duplicates, then construct plain data from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from kubesmith.spec.errors import Location, LocPart, Problem, format_path

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True, slots=True)
class YamlDocument:
    """Parsed data plus the node tree it came from, for locating options."""

    filename: str
    data: Any
    root: yaml.Node | None

    def locate(self, loc: tuple[LocPart, ...]) -> Location | None:
        """Position of the deepest node on `loc`: the key for mapping entries, the item for lists.

        A missing key reports its parent's position, which is where it would have to be added.
        """
        node = self.root
        mark = node.start_mark if node is not None else None
        for part in loc:
            child, child_mark = _child(node, part)
            if child is None:
                break
            node, mark = child, child_mark
        return _location(self.filename, mark)


def _child(node: yaml.Node | None, part: LocPart) -> tuple[yaml.Node | None, Any]:
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.value == str(part):
                return value_node, key_node.start_mark
    elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
        if 0 <= part < len(node.value):
            item = node.value[part]
            return item, item.start_mark
    return None, None


def _location(filename: str, mark: Any) -> Location | None:
    if mark is None:
        return None
    return Location(filename, mark.line + 1, mark.column + 1)


def parse_yaml(text: str, filename: str) -> tuple[YamlDocument | None, list[Problem]]:
    """Parse one YAML document; syntax errors and duplicate keys come back as located problems."""
    loader = _Loader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None, [Problem("(document)", "the file is empty; expected a Cluster document",
                                  Location(filename, 1, 1))]
        problems = _duplicate_keys(root, (), filename)
        data = loader.construct_document(root)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        reason = " ".join(part for part in (exc.context, exc.problem) if part)
        return None, [Problem("(document)", f"YAML syntax error: {reason}", _location(filename, mark))]
    except yaml.YAMLError as exc:  # non-marked errors are rare but must not escape as tracebacks
        return None, [Problem("(document)", f"YAML error: {exc}", Location(filename, 1, 1))]
    finally:
        loader.dispose()
    return YamlDocument(filename, data, root), problems


def _duplicate_keys(node: yaml.Node, path: tuple[LocPart, ...], filename: str) -> list[Problem]:
    problems: list[Problem] = []
    stack: list[tuple[yaml.Node, tuple[LocPart, ...]]] = [(node, path)]
    while stack:
        current, where = stack.pop()
        if isinstance(current, yaml.MappingNode):
            seen: dict[str, Any] = {}
            for key_node, value_node in current.value:
                key = key_node.value if isinstance(key_node, yaml.ScalarNode) else repr(key_node.value)
                if key in seen:
                    first = seen[key]
                    problems.append(Problem(
                        format_path((*where, key)),
                        f"duplicate key (first defined at line {first.line + 1})",
                        _location(filename, key_node.start_mark)))
                else:
                    seen[key] = key_node.start_mark
                stack.append((value_node, (*where, key)))
        elif isinstance(current, yaml.SequenceNode):
            stack.extend((item, (*where, i)) for i, item in enumerate(current.value))
    problems.sort(key=lambda p: (p.location.line, p.location.column) if p.location else (0, 0))
    return problems
