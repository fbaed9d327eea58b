"""`kubesmith options`, `schema`, `init` and `version`: documentation matches the model, the schema
matches the loader, and generated specs are valid."""

from __future__ import annotations

import ipaddress
import json
import socket
import subprocess
import typing
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from pydantic import BaseModel

from conftest import EXAMPLES, ROOT, kubesmith
from kubesmith import __version__
from kubesmith.spec.load import load_spec_text
from kubesmith.spec.model import Cluster
from kubesmith.versions.registry import load_registry


def model_paths(model: type[BaseModel], prefix: str = "") -> set[str]:
    """Every option path of the model, written as users write them (aliases, [] for lists of objects)."""
    paths = set()
    for name, info in model.model_fields.items():
        path = f"{prefix}{info.alias or name}"
        candidates = [info.annotation, *typing.get_args(info.annotation)]
        candidates += [arg for candidate in candidates for arg in typing.get_args(candidate)]
        nested = next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)
        is_list = "list[" in str(info.annotation)
        if nested is None or is_list:
            paths.add(path)
        if nested is not None:
            paths |= model_paths(nested, f"{path}[]." if is_list else f"{path}.")
    return paths


@pytest.fixture(scope="module")
def options_json() -> list[dict[str, str]]:
    result = kubesmith("options", "--output", "json")
    assert result.returncode == 0
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    result = kubesmith("schema")
    assert result.returncode == 0
    document = json.loads(result.stdout)
    jsonschema.Draft202012Validator.check_schema(document)
    return document


def test_options_document_every_option(options_json: list[dict[str, str]]) -> None:
    documented = [doc["path"] for doc in options_json]
    assert len(documented) == len(set(documented))
    assert set(documented) == model_paths(Cluster)
    for doc in options_json:
        assert doc["type"].strip() and doc["default"].strip() and doc["description"].strip(), doc


def test_options_show_defaults_and_derivations(options_json: list[dict[str, str]]) -> None:
    by_path = {doc["path"]: doc for doc in options_json}
    assert by_path["spec.components.apiserver.securePort"]["default"] == "6443"
    assert by_path["spec.components.apiserver.securePort"]["type"] == "integer"
    assert by_path["spec.hosts"]["default"] == "required"
    assert by_path["spec.components.controllerManager.clusterCidr"]["default"] == \
        "derived: spec.network.clusterCidr"
    assert by_path["spec.network.dnsServiceIp"]["default"].startswith("derived: tenth address")
    assert by_path["spec.components.apiserver.extraArgs"]["type"] == \
        "mapping of string to string, integer or boolean"
    assert by_path["spec.components.kubelet.extraConfig"]["type"] == "mapping of string to any value"
    assert [doc["path"] for doc in options_json].index("spec.hosts") < \
        [doc["path"] for doc in options_json].index("spec.hosts[].name")


def test_options_markdown_contains_every_path(options_json: list[dict[str, str]]) -> None:
    result = kubesmith("options")
    assert result.returncode == 0
    for doc in options_json:
        assert f"## `{doc['path']}`\n\n{doc['description']}\n\n- type: {doc['type']}\n" in result.stdout


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda path: path.name)
def test_schema_validates_examples(schema: dict[str, Any], example: Any) -> None:
    jsonschema.validate(yaml.safe_load(example.read_text()), schema, cls=jsonschema.Draft202012Validator)


@pytest.mark.parametrize("change", [
    lambda d: d["spec"]["components"]["apiserver"].update(securePort="6443"),
    lambda d: d["spec"].update(netwrok={}),
    lambda d: d.update(kind="Deployment"),
    lambda d: d["spec"]["hosts"][0].update(roles=["worker"]),
    lambda d: d["spec"]["hosts"][0].pop("address"),
    lambda d: d["spec"]["components"]["apiserver"]["extraArgs"].update({"max-requests-inflight": [40]}),
    lambda d: d["spec"].update(hosts=[]),
], ids=["string-port", "unknown-key", "wrong-kind", "bad-role", "missing-address", "list-flag", "no-hosts"])
def test_schema_rejects_bad_documents(schema: dict[str, Any], change: Any) -> None:
    document = yaml.safe_load((ROOT / "examples" / "ha.yaml").read_text())
    change(document)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(document, schema, cls=jsonschema.Draft202012Validator)


def test_init_output_validates_and_round_trips(schema: dict[str, Any]) -> None:
    result = kubesmith("init", "--name", "demo", "--host", "h1=10.0.0.1", "--host", "h2=10.0.0.2:node")
    assert result.returncode == 0, result.stderr
    document = yaml.safe_load(result.stdout)
    jsonschema.validate(document, schema, cls=jsonschema.Draft202012Validator)
    hosts = document["spec"]["hosts"]
    assert hosts == [{"name": "h1", "address": "10.0.0.1", "roles": ["control-plane", "etcd", "node"]},
                     {"name": "h2", "address": "10.0.0.2", "roles": ["node"]}]
    assert document["spec"]["kubernetesVersion"] == load_registry().tested_release == "1.36.2"
    loaded = load_spec_text(result.stdout, "init.yaml")
    assert yaml.safe_load(yaml.safe_dump(loaded.cluster.model_dump(by_alias=True, exclude_defaults=True))) == document


def test_init_default_roles_for_several_hosts() -> None:
    args = [f"--host=w{i}=10.0.0.{i}" for i in range(1, 6)]
    result = kubesmith("init", "--name", "demo", "--endpoint", "10.0.0.100:6443", *args)
    assert result.returncode == 0, result.stderr
    document = yaml.safe_load(result.stdout)
    assert [host["roles"] for host in document["spec"]["hosts"]] == \
        [["control-plane", "etcd"]] * 3 + [["node"]] * 2
    assert document["spec"]["controlPlaneEndpoint"] == "10.0.0.100:6443"
    ipv6 = kubesmith("init", "--name", "six", "--host", "h1=[fd00::1]:control-plane,etcd,node")
    assert ipv6.returncode == 0, ipv6.stderr
    assert yaml.safe_load(ipv6.stdout)["spec"]["hosts"][0]["address"] == "fd00::1"


@pytest.mark.parametrize("args, message", [
    (["--host", "h1"], "--host 'h1': expected NAME=ADDRESS[:ROLE,ROLE]"),
    (["--host", "h1=10.0.0.1:worker"], "spec.hosts[0].roles[0]: Input should be"),
    (["--host", "h1=10.0.0.999"], "spec.hosts[0].address: '10.0.0.999' is not a valid IPv4"),
    (["--host", "h1=10.0.0.1:node"], "no host has the control-plane role"),
    (["--host", "h1=10.0.0.1", "--kubernetes-version", "1.20.0"], "Kubernetes 1.20.0 is not supported"),
])
def test_init_bad_input_exits_2(args: list[str], message: str) -> None:
    result = kubesmith("init", "--name", "demo", *args)
    assert result.returncode == 2
    assert message in result.stderr
    assert result.stdout == "" and "Traceback" not in result.stderr


def test_init_without_hosts_writes_this_machine_with_a_reachable_address() -> None:
    result = kubesmith("init", "--name", "demo")
    assert result.returncode == 0, result.stderr
    host, = yaml.safe_load(result.stdout)["spec"]["hosts"]
    assert host["name"] == socket.gethostname().split(".")[0].lower()
    assert host["roles"] == ["control-plane", "etcd", "node"]
    address = ipaddress.ip_address(host["address"])
    assert not (address.is_loopback or address.is_link_local or address.is_unspecified)
    assert any(f" {host['address']}/" in line for line in subprocess.run(
        ["ip", "-o", "addr", "show"], capture_output=True, text=True, check=True).stdout.splitlines())


def test_a_loopback_or_link_local_control_plane_address_is_refused_where_it_is(tmp_path: Path) -> None:
    (tmp_path / "lo.yaml").write_text(
        "apiVersion: kubesmith.io/v1alpha1\nkind: Cluster\nmetadata: {name: lo}\nspec:\n"
        "  kubernetesVersion: '1.36.2'\n  hosts:\n"
        "    - {name: h1, address: 127.0.0.1, roles: [control-plane, etcd, node]}\n"
        "    - {name: w1, address: 127.0.0.2, roles: [node]}\n"
        "  components:\n    apiserver: {advertiseAddress: 'fe80::1'}\n")
    result = kubesmith("validate", "lo.yaml", cwd=tmp_path)
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        "error: spec.hosts[0].address: 127.0.0.1 is a loopback address: a control-plane host needs an address "
        "other hosts and pods can reach (kubesmith init without --host writes this machine's) (lo.yaml:7:18)",
        "error: spec.hosts[1].address: 127.0.0.2 is a loopback address: a host needs an address the other hosts "
        "and kubesmith can reach (lo.yaml:8:18)",
        "error: spec.components.apiserver.advertiseAddress: fe80::1 is a link-local address: the API server "
        "publishes it as the kubernetes Service's endpoint, which pods must reach (lo.yaml:10:17)"]


def test_version() -> None:
    text = kubesmith("version")
    registry = load_registry()
    assert text.returncode == 0
    assert text.stdout == f"kubesmith {__version__}; Kubernetes {registry.minors[0]} to {registry.newest}\n"
    data = json.loads(kubesmith("version", "-o", "json").stdout)
    assert data == {"kubesmith": __version__, "kubernetes": list(registry.minors)}
    assert data["kubernetes"][0] == "1.28"
    assert kubesmith("--version").stdout.strip() == f"kubesmith, version {__version__}"
