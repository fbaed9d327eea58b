"""Validate before use: a component's configuration is checked before it is started on trial.

Two layers, as the kubelet's controller validates a checkpoint before it runs it:

* kubesmith's own, for every component: each flag of its argv is one that binary of that release
  takes (the version registry, built from the real binaries' `--help`), and every file a flag
  names is there and, for a YAML/JSON document, parses;
* the component's own, where the binary offers a load that stops before it does anything:
  - kubelet: `--exit-on-lock-contention` without `--lock-file`. The kubelet loads its flags and
    KubeletConfiguration, validates both (the same `ValidateKubeletConfiguration` it runs at
    start), then refuses that combination as the first step of its run, before it touches the
    machine: that refusal is the sign of a valid configuration (checked on v1.36.2; it has no
    dry-run flag). A field the kubelet does not know is accepted by it with a log line
    ("strict decoding error"); kubesmith calls that a problem, as the spec does unknown keys.
  - kube-scheduler: `--write-config-to=FILE` loads and validates flags and configuration (its
    profiles and plugins too), writes the result and exits 0, without connecting anywhere; with
    `--secure-port=0`, since it would bind its serving port, which the running scheduler holds.
  - the others (kube-apiserver, kube-controller-manager, kube-proxy, etcd) have no such load
    (kube-proxy's `--write-config-to` writes defaults, not its configuration): flags only.
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import yaml

from kubesmith import layout
from kubesmith.agent.checkpoints import ComponentConfig, on_root
from kubesmith.plan.credentials import credential_name
from kubesmith.versions.registry import VersionRegistry

DRY_LOAD_SECONDS = 30.0
_KUBELET_VALID = "cannot exit on lock file contention: no lock file specified"
_FAILED = re.compile(r'"command failed" err="(?P<err>(?:[^"\\]|\\.)*)"')
_STRICT = re.compile(r'strict decoding error: (?P<what>(?:[^"\\]|\\.)*)')


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether the configuration may be started, what is wrong with it, and how it was checked."""

    problems: tuple[str, ...]
    checks: tuple[str, ...]
    interrupted: bool = False  # the component's own load was killed: this says nothing yet (`Interrupted`)

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        return "; ".join(self.problems) if self.problems else "valid (" + ", ".join(self.checks) + ")"


def validate(config: ComponentConfig, binary: str, executable: Path | None, minor: str, registry: VersionRegistry,
             root: Path = Path("/"), timeout: float = DRY_LOAD_SECONDS) -> Verdict:
    """Check `config` of `binary` (kubelet, kube-scheduler, ...) for release `minor`; `executable`
    is the binary on this host, for its own load (None: kubesmith's checks only)."""
    problems = [*check_flags(binary, config.argv, minor, registry), *check_files(config, root)]
    checks = [f"flags of {binary} {minor}", "files"]
    if executable is not None and binary in DRY_LOADS and not problems:
        try:
            with without_credentials(config, root) as argv:
                problems += DRY_LOADS[binary](executable, argv, timeout)
            checks.append(f"{binary}'s own load")
        except Interrupted as exc:
            return Verdict(tuple(problems), (*checks, f"{binary}'s own load interrupted ({exc})"), interrupted=True)
    return Verdict(tuple(problems), tuple(checks))


@contextmanager
def without_credentials(config: ComponentConfig, root: Path = Path("/")) -> Iterator[tuple[str, ...]]:
    """The argv for a dry load, reading the files systemd hands the component as credentials
    (`plan.credentials`) from where they are kept, not from the copies in /run/credentials/<unit>/:
    those exist only while the unit runs, and the keeper validates a new configuration while an apply
    restarts it (a load then failed with "stat /run/credentials/...: no such file" and rolled back a good
    configuration). A configuration document that names a copy is rewritten into a temporary file."""
    copies = {layout.credential_path(config.name, credential_name(path)): path for path in config.paths}
    with tempfile.TemporaryDirectory(prefix="kubesmith-validate-") as scratch:
        yield tuple(_from_sources(argument, copies, config, root, Path(scratch)) for argument in config.argv)


def _from_sources(argument: str, copies: dict[str, str], config: ComponentConfig, root: Path, scratch: Path) -> str:
    for copy, source in copies.items():
        argument = argument.replace(copy, source)
    name, equals, value = argument.partition("=")
    if not equals or value not in config.paths:
        return argument
    try:
        text = on_root(root, value).read_text()
    except (OSError, UnicodeDecodeError):
        return argument
    if not any(copy in text for copy in copies):
        return argument
    for copy, source in copies.items():
        text = text.replace(copy, source)
    rewritten = scratch / Path(value).name
    rewritten.write_text(text)
    return f"{name}={rewritten}"


class Interrupted(Exception):
    """A dry load was killed by a signal: systemd signals the agent's whole cgroup when it stops or
    restarts the agent (an apply that changes the components file does), and a load killed then says
    nothing about the configuration. Rejecting it would roll back a good configuration; accepting it
    let a kubelet configuration with a misspelt field graduate (the kubelet runs it), so the keeper
    validates it again, in the next agent if this one is stopping."""


def flag_name(argument: str) -> str | None:
    return argument[2:].split("=", 1)[0] if argument.startswith("--") else None


def check_flags(binary: str, argv: Sequence[str], minor: str, registry: VersionRegistry) -> list[str]:
    if binary not in registry.binaries or not registry.supports(minor):
        return []
    problems = []
    for argument in argv:
        name = flag_name(argument)
        if name is not None and (problem := registry.check_flag(binary, name, minor)):
            problems.append(problem)
    return problems


def check_files(config: ComponentConfig, root: Path) -> list[str]:
    """Every file of the configuration that a flag names exists; its documents parse."""
    problems = []
    for path in config.paths:
        named = any(argument.endswith(f"={path}") or argument == path for argument in config.argv)
        target = on_root(root, path)
        if not target.exists():
            if named:
                problems.append(f"{path} (named by a flag of {config.name}) does not exist")
            continue
        if target.suffix in (".yaml", ".yml", ".conf", ".json"):
            try:
                text = target.read_bytes()
                json.loads(text) if target.suffix == ".json" else list(yaml.safe_load_all(text))
            except (ValueError, yaml.YAMLError) as exc:
                problems.append(f"{path} does not parse: {str(exc).splitlines()[0]}")
    return problems


# ---- the components' own loads

def _run(command: list[str], timeout: float) -> tuple[int | None, str]:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return None, ""
    except OSError as exc:
        return -1, f"cannot run {command[0]}: {exc.strerror}"
    if done.returncode < 0:
        raise Interrupted(f"{Path(command[0]).name} killed by signal {-done.returncode}")
    return done.returncode, done.stderr + done.stdout


def _failure(output: str) -> str:
    found = _FAILED.findall(output)
    if found:
        return found[-1].replace('\\"', '"')
    lines = [line for line in output.strip().splitlines() if line.strip()]
    return lines[-1][-300:] if lines else "no output"


def kubelet_load(executable: Path, argv: Sequence[str], timeout: float) -> list[str]:
    arguments = [a for a in argv if flag_name(a) not in ("lock-file", "exit-on-lock-contention")]
    code, output = _run([str(executable), *arguments, "--exit-on-lock-contention"], timeout)
    if code is None:
        return [f"kubelet did not finish loading its configuration in {timeout:.0f}s"]
    problems = [f"kubelet would ignore {what.replace(chr(92) + chr(34), chr(34))}"
                for what in dict.fromkeys(_STRICT.findall(output))]
    if _KUBELET_VALID not in output:
        problems.insert(0, f"kubelet refuses its configuration: {_failure(output)}")
    return problems


def scheduler_load(executable: Path, argv: Sequence[str], timeout: float) -> list[str]:
    """The load binds its serving port (which the running scheduler holds): port 0 serves nothing."""
    arguments = [a for a in argv if flag_name(a) not in ("write-config-to", "secure-port")] + ["--secure-port=0"]
    with tempfile.TemporaryDirectory(prefix="kubesmith-validate-") as scratch:
        code, output = _run([str(executable), *arguments, f"--write-config-to={scratch}/config.yaml"], timeout)
    if code is None:
        return [f"kube-scheduler did not finish loading its configuration in {timeout:.0f}s"]
    return [] if code == 0 else [f"kube-scheduler refuses its configuration: {_failure(output)}"]


DRY_LOADS = {"kubelet": kubelet_load, "kube-scheduler": scheduler_load}
