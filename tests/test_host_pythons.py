"""The commands kubesmith's units run on hosts start on every python3 minor preflight lets through.

Why this way: a bundle for another minor needs that minor's wheels, which pip fetches from the index,
and tests never download. Nor could .ci/install.sh fetch them for 3.10: the suite's own environment
has multidict 7, which needs 3.11, and a bundle ships the releases installed here. So each installed
interpreter of another minor at or above preflight's floor (pyenv's, or `python3.X` on PATH) runs the
host commands from this checkout's sources and this machine's installed dependencies, on the paths
that load no compiled module (tests/test_light_commands.py keeps them so; a `cpython-311` module is
not even seen by another minor, and PyYAML falls back to pure Python): `--help` of every host command
and subcommand, a probe batch, a `wait` on a listener, `config status`. It fails when kubesmith's
host-side code or a shipped pure-Python dependency uses what the minor lacks (`dataclass(slots=True)`,
click 8.4 and tenacity 9.2 on 3.9; `tomllib`, `datetime.UTC`, `typing.Self` on 3.10): a floor of 3.9
fails here. The compiled part (per-minor and abi3 modules, requirements only older minors have) is
tested in test_lab_suites.py; a whole bundle under 3.10 was run by hand (docs/operations.md).
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import click
import pytest

import kubesmith
from kubesmith.backends.preflight import MIN_HOST_PYTHON
from kubesmith.cli import COMMANDS, cli

# Runs each command in one interpreter (a process each would cost seconds per minor on a busy machine);
# prints {argv: error or ""} as JSON. A listener of its own serves the probe and the wait.
DRIVER = """
import io, json, socket, sys, traceback
paths, commands, batch = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
sys.path[:0] = paths
listener = socket.create_server(("127.0.0.1", 0))
port = listener.getsockname()[1]
from kubesmith.cli import cli
errors = {}
for argv in commands:
    argv = [word.replace("PORT", str(port)) for word in argv]
    sys.stdin, sys.stdout = io.StringIO(batch.replace("PORT", str(port))), io.StringIO()
    try:
        cli.main(argv, prog_name="kubesmith", standalone_mode=False)
        errors[" ".join(argv)] = ""
    except SystemExit as exc:
        errors[" ".join(argv)] = "" if exc.code in (0, None) else f"exit {exc.code}"
    except BaseException:
        errors[" ".join(argv)] = traceback.format_exc()
sys.stdout = sys.__stdout__
print(json.dumps(errors))
"""


def other_minors() -> dict[str, str]:
    """{minor: interpreter} of the installed python3s at or above preflight's floor, but this one."""
    found: dict[str, str] = {}
    pyenv = Path(sys.base_prefix).parent
    candidates = [str(path) for path in sorted(pyenv.glob("3.*/bin/python3"))]
    candidates += [path for minor in range(MIN_HOST_PYTHON[1], 20) if (path := shutil.which(f"python3.{minor}"))]
    for interpreter in candidates:
        minor = subprocess.run([interpreter, "-I", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                               capture_output=True, text=True, timeout=60, check=False).stdout.strip()
        if minor and tuple(map(int, minor.split("."))) >= MIN_HOST_PYTHON and minor != running():
            found.setdefault(minor, interpreter)
    return found


def running() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def host_commands() -> list[list[str]]:
    """`--help` of each command kubesmith's units run on hosts and of each of its subcommands."""
    context = click.Context(cli)
    argvs: list[list[str]] = []
    for name, entry in COMMANDS.items():
        if not entry.on_hosts:
            continue
        argvs.append([name, "--help"])
        command = cli.get_command(context, name)
        if isinstance(command, click.Group):
            argvs += [[name, sub, "--help"] for sub in command.list_commands(context)]
    return argvs


MINORS = other_minors()


@pytest.mark.skipif(not MINORS, reason="no python3 of another minor at or above preflight's floor is installed")
@pytest.mark.parametrize("minor", sorted(MINORS))
def test_the_host_commands_run_on_every_minor_preflight_accepts(tmp_path: Path, minor: str) -> None:
    document = tmp_path / "scheduler.yaml"
    document.write_text("kind: KubeSchedulerConfiguration\n")
    components = tmp_path / "components.json"
    components.write_text(json.dumps({"minor": "1.36", "components": [
        {"name": "kube-scheduler", "argv": ["--config", str(document)], "paths": [str(document)],
         "binary": "kube-scheduler"}]}))
    actions = [["probe", "--timeout", "2"], ["wait", "--deadline", "5", "--quiet", "tcp://127.0.0.1:PORT"],
               ["config", "status", "--components-file", str(components), "--checkpoints-dir", str(tmp_path / "c")]]
    batch = json.dumps([{"probe": "tcp://127.0.0.1:PORT", "mode": "check"},
                        {"probe": "http://127.0.0.1:9/healthz", "mode": "check"}])
    paths = [str(Path(kubesmith.__file__).parent.parent), sysconfig.get_paths()["purelib"],
             sysconfig.get_paths()["platlib"]]
    argv = [MINORS[minor], "-I", "-B", "-c", DRIVER, json.dumps(paths), json.dumps(host_commands() + actions), batch]
    run = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False,
                         env={**os.environ, "NO_COLOR": "1"})
    assert run.returncode == 0, run.stderr
    failed = {argv: error for argv, error in json.loads(run.stdout).items() if error}
    assert failed == {}, f"python {minor}: " + "\n".join(f"{argv}: {error}" for argv, error in failed.items())


def host_side_modules() -> dict[str, Path]:
    """kubesmith's modules that the commands run on hosts may import, lazily or not: every import
    reachable from their command modules (a superset: a group's operator-only subcommands count too)."""
    package = Path(kubesmith.__file__).parent
    found: dict[str, Path] = {}
    pending = ["kubesmith.cli", *{entry.module for entry in COMMANDS.values() if entry.on_hosts}]
    while pending:
        name = pending.pop()
        relative = package.parent / name.replace(".", "/")
        path = relative / "__init__.py" if relative.is_dir() else relative.with_suffix(".py")
        if name in found or not path.is_file():
            continue
        found[name] = path
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("kubesmith"):
                pending += [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            elif isinstance(node, ast.Import):
                pending += [alias.name for alias in node.names if alias.name.startswith("kubesmith")]
    return found


def test_host_side_code_catches_asyncio_timeouts_by_their_own_name() -> None:
    """On 3.10 `asyncio.wait_for` and aiohttp raise asyncio.TimeoutError, which is not yet the builtin
    TimeoutError (3.11 made it an alias): `except TimeoutError` around them let the agent's first pause
    end its process there. Sockets' own timeouts are the builtin; a handler may name both."""
    wrong = []
    for name, path in sorted(host_side_modules().items()):
        for node in ast.walk(ast.parse(path.read_text())):
            caught = node.type if isinstance(node, ast.ExceptHandler) else None
            if isinstance(node, ast.Call) and ast.unparse(node.func) in ("contextlib.suppress", "suppress"):
                caught = ast.Tuple(elts=node.args)
            if caught is None:
                continue
            names = [ast.unparse(each) for each in (caught.elts if isinstance(caught, ast.Tuple) else [caught])]
            if "TimeoutError" in names and "asyncio.TimeoutError" not in names:
                wrong.append(f"{name}:{node.lineno}")
    assert wrong == []
