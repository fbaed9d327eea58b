"""Bring the version registry's facts for one release in line with that release's real binaries.

    python3 tools/registry_from_binaries.py BIN_DIR [--gate-candidates FILE] [--gates-only]

Reads each Kubernetes binary's `--help` (flags, deprecated flags, alpha and beta feature gates)
and asks the binary about every registry flag `--help` does not show and every candidate gate
name (GA and deprecated gates are not listed in `--help`; FILE holds names to ask about, one per
line or space-separated: `tools/gate_candidates.py` lists them from the binaries themselves).
Where registry and binary disagree, the binary wins: a history entry with the evidence is added
for the flag, and the release's gate table is rewritten. The release is the one the binaries
report. Rerun after a new release is added; the tests compare again. `--gates-only` writes the
release's gate table alone: the flag facts (and their types) stay those of the release the tests
compare against (an older release's binaries would rewrite the types).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # binary_facts: how the tests read the binaries, too

from binary_facts import HelpFacts, probe_gate, read_help  # noqa: E402

from kubesmith.binaries import reported_release  # noqa: E402
from kubesmith.versions.registry import VersionRegistry  # noqa: E402

DATA = ROOT / "src/kubesmith/versions/data/k8s_flags.json"
BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy")


def accepts_flag(binary: Path, flag: str) -> bool:
    """Whether the binary knows `--flag` (hidden flags included): only an unknown one says so."""
    result = subprocess.run([str(binary), f"--{flag}=1", "--version"], capture_output=True, text=True,
                            timeout=60, check=False)
    return f"unknown flag: --{flag}" not in result.stdout + result.stderr


def deprecated_hidden(binary: Path, flag: str) -> bool:
    result = subprocess.run([str(binary), f"--{flag}=1", "--version"], capture_output=True, text=True,
                            timeout=60, check=False)
    return f"Flag --{flag} has been deprecated" in result.stdout + result.stderr


def update(data: dict, bin_dir: Path, candidates: list[str], gates_only: bool = False) -> list[str]:
    release = reported_release(bin_dir / "kube-apiserver")
    assert release, "kube-apiserver reports no release"
    minor = ".".join(release.split(".")[:2])
    registry = VersionRegistry(data)
    changes: list[str] = []
    gates: dict[str, dict[str, str]] = {}
    for name in BINARIES:
        binary = bin_dir / name
        facts = read_help(binary)
        if not gates_only:
            changes += update_flags(data["binaries"][name], binary, facts, registry.flags(name, minor), release)
        table = {gate: gate_text(stage, default, False) for gate, (stage, default) in facts.gates.items()}
        for gate in candidates:
            if gate not in table and (fact := probed_gate(binary, gate)):
                table[gate] = fact
        gates[name] = table
    data.setdefault("feature_gates", {})[minor] = shared_table(gates, f"v{release}: --help and gate probes")
    changes.append(f"feature gates of {minor}: {len(data['feature_gates'][minor]['gates'])}")
    return changes


def update_flags(entry: dict, binary: Path, facts: HelpFacts, accepted: set[str], release: str) -> list[str]:
    """One binary's flag facts (history, types, deprecated flags) as its `--help` and probes show them."""
    name, minor, evidence = binary.name, ".".join(release.split(".")[:2]), f"v{release} --help"
    changes: list[str] = []
    for flag in sorted(facts.flags - accepted):
        entry.setdefault("history", []).append(
            {"flag": flag, "added_in": minor, "evidence": evidence, "confidence": "binary"})
        changes.append(f"{name}: --{flag} accepted in {minor}")
    hidden_deprecated = set()
    for flag in sorted(accepted - facts.flags):
        if not accepts_flag(binary, flag):
            entry.setdefault("history", []).append(
                {"flag": flag, "removed_in": minor, "evidence": f"v{release}: unknown flag",
                 "confidence": "binary"})
            changes.append(f"{name}: --{flag} unknown in {minor}")
        elif deprecated_hidden(binary, flag):
            hidden_deprecated.add(flag)
    if facts.types and facts.types != entry.get("types"):
        changes.append(f"{name}: flag types as {evidence} shows them ({len(facts.types)})")
        entry["types"] = dict(sorted(facts.types.items()))
    deprecated = sorted(facts.deprecated | hidden_deprecated)
    if deprecated != sorted(entry.get("deprecated", [])):
        changes.append(f"{name}: deprecated flags as {evidence} marks them ({len(deprecated)})")
        entry["deprecated"] = deprecated
        entry["deprecated_in"] = minor
    return changes


def gate_text(stage: str, default: bool | None, locked: bool) -> str:
    """One gate as the registry keeps it: `BETA true`, `GA true locked`, `DEPRECATED`."""
    words = [stage] + ([] if default is None else [str(default).lower()]) + (["locked"] if locked else [])
    return " ".join(words)


def probed_gate(binary: Path, gate: str) -> str | None:
    """A gate `--help` does not list, as the binary takes it; None when it does not know the name."""
    if probe_gate(binary, gate, True) == "unknown":
        return None
    refuses_false = probe_gate(binary, gate, False) == "locked"
    refuses_true = not refuses_false and probe_gate(binary, gate, True) == "locked"
    deprecated = probe_gate(binary, gate, not refuses_false) == "deprecated"
    default = True if refuses_false else (False if refuses_true else None)
    return gate_text("DEPRECATED" if deprecated else "GA", default, refuses_false or refuses_true)


def shared_table(gates: dict[str, dict[str, str]], evidence: str) -> dict[str, object]:
    """One table for the gates the binaries share, and per binary the names it lacks or takes otherwise."""
    union: dict[str, str] = {}
    for table in gates.values():
        for gate, text in table.items():
            union.setdefault(gate, text)
    per_binary = {binary: {gate: table.get(gate, "unknown") for gate in union if table.get(gate) != union[gate]}
                  for binary, table in gates.items()}
    return {"evidence": evidence, "gates": dict(sorted(union.items())),
            "differences": {binary: dict(sorted(diff.items())) for binary, diff in per_binary.items() if diff}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bin_dir", type=Path)
    parser.add_argument("--gate-candidates", type=Path, default=None)
    parser.add_argument("--gates-only", action="store_true", help="write the release's gate table alone")
    args = parser.parse_args()
    candidates = args.gate_candidates.read_text().split() if args.gate_candidates else []
    data = json.loads(DATA.read_text())
    changes = update(data, args.bin_dir, candidates, args.gates_only)
    DATA.write_text(json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    print("\n".join(changes) or "no change", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
