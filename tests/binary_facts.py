"""What a Kubernetes binary itself says about its flags and feature gates: the registry's ground truth.

`--help` lists every flag it accepts (hidden, deprecated ones excepted) and marks deprecated ones,
and lists the alpha and beta feature gates with their defaults. GA and deprecated gates are not
listed; asking the binary to set one shows what it is: an unknown name is "unrecognized" (a
warning), a locked one refuses the other value (an error), a deprecated one warns. Used by
`tools/registry_from_binaries.py` to write the registry's facts and by the tests to check them.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

FLAG_LINE = re.compile(r"^\s+(?:-[A-Za-z], )?--([a-z0-9][a-z0-9_-]*)\b")
# pflag's help: `--name type   usage`, no type word for a boolean (a back-quoted word in the usage
# replaces the type word, so only pflag's own type names count)
TYPED_FLAG_LINE = re.compile(r"^\s+(?:-[A-Za-z], )?--([a-z0-9][a-z0-9_-]*)(?: ([A-Za-z0-9]+|pattern=N,\.\.\.))?"
                             r"(?:\s{2,}|$)")
CHECKED_TYPES = frozenset({"duration", "int", "int32", "uint", "uint32", "float", "float32", "strings", "ip", "ipport",
                           "quantity", "mapStringString", "stringToString", "int32Slice", "namedCertKey",
                           "pattern=N,..."})
# component-base's map flags all call their type mapStringString; how one parses its value is asked of the
# binary (read_help): "a" alone passes only ConfigurationMap (--runtime-config), "a<b" only the
# LangleSeparatedMapStringString (the kubelet's eviction thresholds), "a=b,c" only MapStringString without
# splitting (--oidc-required-claim); the rest split pairs at commas
MAP_PARSERS = (("a", "configurationMap"), ("a<b", "langleSeparatedMapStringString"),
               ("a=b,c", "mapStringStringNoSplit"))
GATE_LINE = re.compile(r"^\s+(?:kube:)?([A-Z][A-Za-z0-9]+)=true\|false \((ALPHA|BETA|GA|DEPRECATED) - default=(true|false)\)")
GateKind = Literal["unknown", "locked", "deprecated", "settable"]
PROXY_PROBE = """apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {{kubeconfig: {kubeconfig}}}
featureGates: {{{name}: {value}}}
"""


@dataclass(frozen=True, slots=True)
class HelpFacts:
    flags: frozenset[str]
    deprecated: frozenset[str]
    gates: dict[str, tuple[str, bool]]  # alpha and beta gates: name -> (stage, default)
    types: dict[str, str] | None = None  # flag -> "bool", "duration", ... (CHECKED_TYPES only)


def help_facts(text: str) -> HelpFacts:
    flags, deprecated, gates, types = set(), set(), {}, {}
    for line in text.splitlines():
        if match := FLAG_LINE.match(line):
            flags.add(match.group(1))
            if typed := TYPED_FLAG_LINE.match(line):
                kind = typed.group(2) or "bool"
                if kind == "bool" or kind in CHECKED_TYPES:
                    types[typed.group(1)] = kind
            if "(DEPRECATED:" in line:
                deprecated.add(match.group(1))
        elif match := GATE_LINE.match(line):
            gates[match.group(1)] = (match.group(2), match.group(3) == "true")
    flags.discard("help")
    types.pop("help", None)
    return HelpFacts(frozenset(flags), frozenset(deprecated), gates, types)


def read_help(binary: Path) -> HelpFacts:
    result = subprocess.run([str(binary), "--help"], capture_output=True, text=True, timeout=60, check=False)
    facts = help_facts(result.stdout + result.stderr)
    types = dict(facts.types or {})
    for flag, kind in types.items():
        if kind == "mapStringString":
            types[flag] = next((parser for value, parser in MAP_PARSERS if parses(binary, flag, value)), kind)
    return HelpFacts(facts.flags, facts.deprecated, facts.gates, types)


def parses(binary: Path, flag: str, value: str) -> bool:
    """Whether the binary's flag parsing takes `value` for `flag` (it stops at --version before starting)."""
    with tempfile.TemporaryDirectory() as scratch:
        result = subprocess.run([str(binary), f"--{flag}={value}", "--version"], capture_output=True, text=True,
                                timeout=60, check=False, cwd=scratch)
    return result.returncode == 0 and "invalid argument" not in result.stdout + result.stderr


def probe_gate(binary: Path, name: str, value: bool, attempts: int = 3) -> GateKind:
    """How the binary takes the gate `name` set to `value`; it exits before serving anything.

    The kubelet applies --feature-gates only on its way to reading a config file; kube-proxy takes
    gates from its config file alone (it then stops at the missing kubeconfig). "settable" needs
    proof that the binary went past its gates (it reached that next step); a run that stopped
    earlier for another reason (kube-proxy probes iptables first, which another process may hold)
    is tried again."""
    setting = f"{name}={str(value).lower()}"
    output = ""
    for _ in range(attempts):
        with tempfile.TemporaryDirectory() as scratch:
            if binary.name == "kube-proxy":
                config = Path(scratch) / "proxy.yaml"
                config.write_text(PROXY_PROBE.format(kubeconfig=Path(scratch) / "missing", name=name,
                                                     value=str(value).lower()))
                argv, next_step = ["--config", str(config)], "missing: no such file"
            elif binary.name == "kubelet":
                argv, next_step = [f"--feature-gates={setting}", "--config", str(Path(scratch) / "missing.yaml")], \
                    "missing.yaml"
            else:
                argv, next_step = [f"--feature-gates={setting}", "--version"], "Kubernetes v"
            result = subprocess.run([str(binary), *argv], capture_output=True, text=True, timeout=60, check=False)
        output = result.stdout + result.stderr
        if f"unrecognized feature gate: {name}" in output:
            return "unknown"
        if f"cannot set feature gate {name} to" in output and "locked" in output:
            return "locked"
        if "deprecated feature gate" in output and name in output:
            return "deprecated"
        if next_step in output:
            return "settable"
    raise RuntimeError(f"{binary.name} stopped before its feature gates were applied ({attempts} runs): "
                       f"{output.strip()[-300:]}")
