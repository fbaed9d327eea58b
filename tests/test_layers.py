"""kubesmith's packages form a one-way ladder: a module imports only from its own rung or below.

Bottom to top (docs/architecture.md draws it):

    base        layout, urls, fsutil, formats, ... ; versions (what each release accepts)
    transport   SSH, nothing else; lab (the test bed of nspawn hosts) stands beside it
    vocabulary  the spec's value types and located errors; the plan's data, facts, host environment and etcd bootstraps
    pki         the certificate list, issuing, the PKI state directory
    modules     one file per component: its options and its contribution to a host's plan
    spec        the cluster file: its schema is the modules' options, plus hosts and network
    plan        evaluate (spec + modules -> plan), and the plan as text
    health      probes, `kubesmith wait`, status
    ca          tokens, the signing policy, the server and its client
    agent       renewal on every host (a client of the CA service)
    node        a node's pod network and image loading, before pods run
    backends    render, systemd, apply, run, join, day-2 operations
    cli         one thin file per command group

A rung never imports from a rung above it, not even inside a function. An import under
`if TYPE_CHECKING:` names a type only, for checkers, and is allowed upward: modules read the spec
document, whose type is built from their own options.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parents[1] / "src"
LADDER: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("base", ("kubesmith", "kubesmith.versions")),
    ("transport", ("kubesmith.transport", "kubesmith.lab")),
    ("vocabulary", ("kubesmith.vocabulary",)),
    ("pki", ("kubesmith.pki",)),
    ("modules", ("kubesmith.modules",)),
    ("spec", ("kubesmith.spec",)),
    ("plan", ("kubesmith.plan",)),
    ("health", ("kubesmith.health",)),
    ("ca", ("kubesmith.ca",)),
    ("agent", ("kubesmith.agent",)),
    ("node", ("kubesmith.node",)),
    ("backends", ("kubesmith.backends",)),
    ("cli", ("kubesmith.cli",)),
)
SIBLINGS = {"transport": ("kubesmith.transport", "kubesmith.lab")}  # rungs whose packages stay apart


def rung(module: str) -> int:
    """The rung of a dotted module name: its longest matching prefix in LADDER."""
    best, found = -1, 0
    for index, (_, prefixes) in enumerate(LADDER):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, found = len(prefix), index
    return found


def module_name(path: Path, source: Path) -> str:
    parts = path.relative_to(source).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def runtime_imports(tree: ast.Module, package: str, source: Path) -> list[tuple[int, str]]:
    """(line, module) of every kubesmith import outside `if TYPE_CHECKING:` blocks."""
    skipped = {id(node) for block in ast.walk(tree) if isinstance(block, ast.If) and _is_type_checking(block.test)
               for child in block.body for node in ast.walk(child)}
    found = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom):
            base = _absolute(node, package)
            if base.startswith("kubesmith"):
                found += [(node.lineno, _submodule(f"{base}.{alias.name}", base, source)) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names if alias.name.startswith("kubesmith")]
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"


def _absolute(node: ast.ImportFrom, package: str) -> str:
    if not node.level:
        return node.module or ""
    base = package.split(".")[: len(package.split(".")) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _submodule(candidate: str, base: str, source: Path) -> str:
    """`from kubesmith.ca import tokens` imports the module kubesmith.ca.tokens; `from kubesmith.ca.tokens
    import parse_token` imports from kubesmith.ca.tokens."""
    parts = candidate.split(".")
    path = source.joinpath(*parts)
    return candidate if path.with_suffix(".py").exists() or path.is_dir() else base


def violations(source: Path = SOURCE) -> list[str]:
    found = []
    for path in sorted(source.joinpath("kubesmith").rglob("*.py")):
        module = module_name(path, source)
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        own = rung(module)
        for line, target in runtime_imports(ast.parse(path.read_text()), package, source):
            where = f"{path.relative_to(source)}:{line}"
            if rung(target) > own:
                found.append(f"{where}: {module} ({LADDER[own][0]}) imports {target} ({LADDER[rung(target)][0]})")
            elif rung(target) == own and LADDER[own][0] in SIBLINGS and _apart(module, target, own):
                found.append(f"{where}: {module} imports {target}, which stands beside it")
    return found


def _apart(module: str, target: str, own: int) -> bool:
    packages = SIBLINGS[LADDER[own][0]]
    home = [p for p in packages if module == p or module.startswith(p + ".")]
    return bool(home) and not (target == home[0] or target.startswith(home[0] + "."))


def test_no_module_imports_from_a_rung_above_its_own() -> None:
    assert violations() == []



def test_each_rung_is_whole_packages() -> None:
    """One package (or sibling packages) per rung: a module's rung is its package's, so a folder of the
    tree never spans two rungs and a picture of folders and imports shows the ladder as it is."""
    for _, prefixes in LADDER:
        assert all(prefix == "kubesmith" or SOURCE.joinpath(*prefix.split(".")).is_dir() for prefix in prefixes)
    spanning = [module for path in SOURCE.joinpath("kubesmith").rglob("*.py")
                if rung(module := module_name(path, SOURCE)) != rung(".".join(module.split(".")[:2]))]
    assert spanning == []

@pytest.mark.parametrize(("source", "imported", "upward"), [
    ("src/kubesmith/transport/ssh.py", "from kubesmith.vocabulary.model import HostPlan", True),
    ("src/kubesmith/vocabulary/facts.py", "from kubesmith.modules import MODULES", True),
    ("src/kubesmith/health/wait.py", "from kubesmith.backends.run import RunPaths", True),
    ("src/kubesmith/backends/apply.py", "from kubesmith.health.wait import wait_ready", False),
    ("src/kubesmith/modules/base.py", "if TYPE_CHECKING:\n    from kubesmith.spec.model import Cluster", False),
])
def test_the_check_sees_an_upward_import(tmp_path: Path, source: str, imported: str, upward: bool) -> None:
    """The check itself: an upward import planted in a copy of the tree is reported, a downward one is not."""
    copy = tmp_path / "src"
    shutil.copytree(SOURCE / "kubesmith", copy / "kubesmith", ignore=shutil.ignore_patterns("__pycache__"))
    planted = copy / source.removeprefix("src/")
    planted.write_text(planted.read_text() + "\n" + imported + "\n")
    reported = [line for line in violations(copy) if line.startswith(source.removeprefix("src/"))]
    assert bool(reported) == upward, reported
