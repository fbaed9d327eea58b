"""YAML with positions: libyaml parses, the node tree answers "where is this option?".

PyYAML's loader drops positions and silently keeps the last of duplicate keys, so we
compose the node tree ourselves, report duplicates, then construct plain data from it.

A cluster file is input from anyone, so the reader has budgets, as go-yaml (kubectl's) has:
flow nesting is capped before libyaml composes (its C composer recurses and crashes the
process near 100,000 levels), and an alias that contains itself or expands beyond
MAX_ALIAS_NODES is refused before any data is built ("billion laughs").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import yaml

from kubesmith.vocabulary.errors import Location, LocPart, Problem, format_path

Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: the cluster file and add-on manifests
MAX_DEPTH = 64  # a cluster file nests about 6 levels; extraConfig documents a few more
MAX_ALIAS_NODES = 100_000  # nodes reached through aliases, counted once per use
_OPEN = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
_CLOSE = (yaml.MappingEndEvent, yaml.SequenceEndEvent)


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
    loader = Loader(text)
    root: yaml.Node | None = None
    try:
        if breaker := _unicode_line_break(text, filename) or _version_directive(text, filename):
            return None, [breaker]
        if too_deep := nesting_problem(text, filename):
            return None, [too_deep]
        root = _single_node(loader, text)
        if root is None:
            return None, [Problem("(document)", "the file is empty; expected a Cluster document",
                                  Location(filename, 1, 1))]
        problems, refused = _duplicate_keys(root, (), filename)
        if refused is not None:
            return None, [refused]
        data = loader.construct_document(root)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        reason = " ".join(part for part in (exc.context, with_alias_name(exc.problem, mark, text)) if part)
        return None, [Problem("(document)", f"YAML syntax error: {reason}", _location(filename, mark))]
    except yaml.YAMLError as exc:  # non-marked errors are rare but must not escape as tracebacks
        return None, [Problem("(document)", f"YAML error: {exc}", Location(filename, 1, 1))]
    except ValueError:  # Python refuses to convert integers of more than 4,300 digits
        return None, [_oversized_integer(root, filename)]
    finally:
        loader.dispose()
    return YamlDocument(filename, data, root), problems


def _single_node(loader: Loader, text: str) -> yaml.Node | None:
    """The file's one document. An empty one (a `---` at the end, or two in a row) is skipped, as kubectl
    skips it; a second document with content is an error, located at its `---`."""
    found: yaml.Node | None = None
    while loader.check_node():
        node = loader.get_node()
        if isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null" and node.value == "" \
                and not node.style:  # plain and empty: libyaml says '', PyYAML None
            continue
        if found is not None:
            lines = text.split("\n")  # a later document begins with `---`, on its line or above it
            line = next((n for n in range(node.start_mark.line, -1, -1) if lines[n].startswith("---")),
                        node.start_mark.line)
            mark = yaml.Mark(node.start_mark.name, 0, line, 0, None, None)
            raise yaml.composer.ComposerError("expected a single document in the stream", found.start_mark,
                                              "but found another document", mark)
        found = node
    return found


_UNICODE_BREAKS = {"\x85": "next line (U+0085, NEL)", "\u2028": "line separator (U+2028)",
                   "\u2029": "paragraph separator (U+2029)"}


def _unicode_line_break(text: str, filename: str) -> Problem | None:
    """YAML 1.2 reads NEL, U+2028 and U+2029 as ordinary characters, YAML 1.1 (PyYAML, libyaml) as line
    breaks: in a comment one would end it and make its rest YAML, with every later line number off by one.
    Refused wherever it is written raw, located as an editor counts lines; an escape stays possible."""
    found = re.search("[\x85\u2028\u2029]", text)
    if found is None:
        return None
    line = text.count("\n", 0, found.start()) + 1
    column = found.start() - (text.rfind("\n", 0, found.start()) + 1) + 1
    return Problem("(document)", f"a raw {_UNICODE_BREAKS[found[0]]}: YAML 1.1 readers take it for a line break "
                   "(in a comment too); remove it, or write it escaped in a double-quoted string "
                   f"(\"\\u{ord(found[0]):04x}\")", Location(filename, line, column))


_VERSION_DIRECTIVE = re.compile(r"^%YAML[ \t]+(\S+)", re.MULTILINE)


def _version_directive(text: str, filename: str) -> Problem | None:
    """A `%YAML 1.2` directive promises YAML 1.2's reading (`on` and `yes` are strings there), which no
    reader here keeps: PyYAML, like kubectl and the Kubernetes binaries, reads YAML 1.1 whatever it says."""
    found = _VERSION_DIRECTIVE.search(text)
    if found is None or found[1] == "1.1":
        return None
    line = text.count("\n", 0, found.start()) + 1
    return Problem("(document)", f"%YAML {found[1][:20]}: kubesmith reads YAML 1.1, as kubectl does (`on`, "
                   "`yes` and `off` are booleans there, not strings); remove the directive, and quote a value meant "
                   "as text", Location(filename, line, 1))


_ALIAS = re.compile(r"\*([^\s,\[\]{}]+)")


def with_alias_name(problem: str | None, mark: Any, text: str) -> str | None:
    """libyaml says "found undefined alias" without the name: add it, read from the text at the mark."""
    if not problem or not problem.startswith("found undefined alias") or mark is None or "'" in problem:
        return problem
    lines = text.splitlines()
    line = lines[mark.line] if 0 <= mark.line < len(lines) else ""
    found = _ALIAS.match(line, mark.column)
    return f"{problem} {found.group()!r} (no anchor &{found.group(1)} before it)" if found else problem


def _oversized_integer(root: yaml.Node | None, filename: str) -> Problem:
    """The first integer scalar too long to convert, located (found without recursion)."""
    stack: list[tuple[yaml.Node, tuple[LocPart, ...]]] = [(root, ())] if root is not None else []
    while stack:
        node, where = stack.pop()
        if isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:int" and len(node.value) > 4000:
            return Problem(format_path(where), f"an integer of {len(node.value):,} digits: no option takes one",
                           _location(filename, node.start_mark))
        if isinstance(node, yaml.MappingNode):
            stack.extend((value, (*where, key.value if isinstance(key, yaml.ScalarNode) else "?"))
                         for key, value in reversed(node.value))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((item, (*where, index)) for index, item in reversed(list(enumerate(node.value))))
    return Problem("(document)", "a value could not be converted (an integer too long?)", Location(filename, 1, 1))


def nesting_problem(text: str, filename: str, what: str = "a cluster file") -> Problem | None:
    """Nesting beyond MAX_DEPTH in any document of `text`, found from libyaml's event stream (iterative,
    no recursion; a YAMLError when it is no YAML at all)."""
    scanner = Loader(text)
    try:
        depth = 0
        while (event := scanner.get_event()) is not None:
            if isinstance(event, _OPEN):
                depth += 1
                if depth > MAX_DEPTH:
                    return Problem("(document)", f"nested too deeply (more than {MAX_DEPTH} levels); {what} "
                                   "needs far fewer", _location(filename, event.start_mark))
            elif isinstance(event, _CLOSE):
                depth -= 1
    finally:
        scanner.dispose()
    return None


def structure_problems(node: yaml.Node, filename: str) -> tuple[list[Problem], Problem | None]:
    """Duplicate keys in the document of `node`, each located (kubectl refuses them too: "mapping key
    already defined"), and a recursive alias or aliases expanding beyond MAX_ALIAS_NODES, which refuse the
    whole file (the second result)."""
    return _duplicate_keys(node, (), filename)


def _duplicate_keys(node: yaml.Node, path: tuple[LocPart, ...],
                    filename: str) -> tuple[list[Problem], Problem | None]:
    """Duplicate keys, and the aliases the data will be built through, walked with a budget.

    A node met again on its own path is a recursive alias; nodes met again elsewhere are alias
    expansions, counted against MAX_ALIAS_NODES. Either refuses the file (the second result).
    """
    seen_nodes: set[int] = set()
    on_path: set[int] = set()
    expanded = 0
    stack: list[tuple[yaml.Node, tuple[LocPart, ...], Any, bool]] = [(node, path, node.start_mark, False)]
    while stack:
        current, where, mark, leaving = stack.pop()
        if leaving:
            on_path.discard(id(current))
            continue
        if id(current) in on_path:
            return [], Problem(format_path(where), "an alias refers to a node that contains it (a recursive "
                               f"alias); the anchor is at line {current.start_mark.line + 1}",
                               _location(filename, mark))
        if id(current) in seen_nodes:
            expanded += 1
            if expanded > MAX_ALIAS_NODES:
                return [], Problem(format_path(where), f"aliases expand to more than {MAX_ALIAS_NODES:,} "
                                   "nodes (excessive aliasing)", _location(filename, mark))
        seen_nodes.add(id(current))
        if not isinstance(current, yaml.CollectionNode):
            continue
        on_path.add(id(current))
        stack.append((current, where, mark, True))
        if isinstance(current, yaml.MappingNode):
            stack.extend((value_node, (*where, _key_text(key_node)), key_node.start_mark, False)
                         for key_node, value_node in current.value)
        else:
            stack.extend((item, (*where, i), mark, False) for i, item in enumerate(current.value))
    return _duplicates(node, path, filename), None


def _key_text(key_node: yaml.Node) -> str:
    return key_node.value if isinstance(key_node, yaml.ScalarNode) else \
        f"(key at line {key_node.start_mark.line + 1})"  # its data may be recursive: no repr


def _duplicates(node: yaml.Node, path: tuple[LocPart, ...], filename: str) -> list[Problem]:
    """Each mapping's duplicate keys, once: every node is visited once, in document order, so a mapping
    under an anchor is named by the anchor's path and not again by each alias's (the aliases are known
    not to recurse)."""
    problems: list[Problem] = []
    visited: set[int] = set()
    stack: list[tuple[yaml.Node, tuple[LocPart, ...]]] = [(node, path)]
    while stack:
        current, where = stack.pop()
        if id(current) in visited or not isinstance(current, yaml.CollectionNode):
            continue
        visited.add(id(current))
        if isinstance(current, yaml.SequenceNode):
            stack.extend(reversed([(item, (*where, i)) for i, item in enumerate(current.value)]))
            continue
        seen: dict[str, Any] = {}
        for key_node, _ in current.value:
            key = _key_text(key_node)
            if key in seen:
                problems.append(Problem(format_path((*where, key)),
                                        f"duplicate key (first defined at line {seen[key].line + 1})",
                                        _location(filename, key_node.start_mark)))
            else:
                seen[key] = key_node.start_mark
        stack.extend(reversed([(value_node, (*where, _key_text(key_node))) for key_node, value_node in current.value]))
    problems.sort(key=lambda p: (p.location.line, p.location.column) if p.location else (0, 0))
    return problems
