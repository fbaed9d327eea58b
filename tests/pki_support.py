"""Helpers shared by the PKI and render tests: plans from spec text, rendering, cert inspection."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from cryptography import x509
from plan_support import plan_of

from kubesmith.backends.render import RenderResult, render
from kubesmith.vocabulary.model import Plan

REPO = Path(__file__).resolve().parents[1]
HA_SPEC = REPO / "examples" / "ha.yaml"


def write_spec(path: Path, name: str, hosts: list[dict], key_algorithm: str = "ecdsa-p256",
               endpoint: str | None = None) -> Path:
    spec: dict = {"kubernetesVersion": "1.36.2", "hosts": hosts, "pki": {"keyAlgorithm": key_algorithm}}
    if endpoint:
        spec["controlPlaneEndpoint"] = endpoint
    document = {"apiVersion": "kubesmith.io/v1alpha1", "kind": "Cluster", "metadata": {"name": name}, "spec": spec}
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def render_spec(spec: Path, state: Path, out: Path) -> tuple[Plan, RenderResult]:
    plan = plan_of(spec)
    return plan, render(plan, state, out)


def manifest(out: Path, host: str) -> dict[str, dict]:
    return {entry["path"]: entry for entry in json.loads((out / host / "manifest.json").read_text())["files"]}


def on_host(out: Path, host: str, path: str) -> Path:
    return out / host / path.lstrip("/")


def cert_at(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def snapshot(root: Path) -> dict[str, bytes]:
    """Every regular file under root, by relative path (the lock file excluded)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != ".lock"}
