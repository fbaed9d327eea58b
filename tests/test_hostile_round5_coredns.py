"""Hostile CoreDNS input, audit round 5: server-block lines that break out of their block (a second
`cluster.local` block taking every Service lookup), plugins CoreDNS 1.13.1 takes once or with bounded
arguments, a CIDR key over the service range, forwarding to CoreDNS's own or the API server's Service,
environment references, and `import`. Facts checked against the real coredns 1.13.1 binary (run on
127.0.0.1 with -dns.port 0): the quoted messages are its own. Each hostile file ends in one located
error (exit 1); the legitimate neighbours stay valid.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import kubesmith
from test_hostile_values import HEAD, HOSTS, component
from test_spec_hostile import BOUND_SECONDS, assert_one_located_error, bounded

DNS = "spec.components.coreDns"
BLOCK = f"{DNS}.extraServerBlocks.example.org"


def block(*lines: str) -> str:
    """A file whose CoreDNS has one extra block, example.org, of these lines."""
    items = ", ".join("'" + line.replace("'", "''") + "'" for line in lines)
    return HOSTS + component("coreDns", f"{{extraServerBlocks: {{'example.org': [{items}]}}}}")


# name -> (what follows `spec.kubernetesVersion`, option path of the first error, message fragment)
CASES: dict[str, tuple[str, str, str]] = {
    # Z42/Z46: CoreDNS read these as two blocks, example.org and cluster.local (checked with the binary)
    "close-then-cluster-block": (block("whoami", "}", "cluster.local {", "forward . 6.6.6.6"), f"{BLOCK}[1]",
                                 "closes the server block itself"),
    "close-and-open-on-one-line": (block("whoami", "} cluster.local {", "forward . 6.6.6.6"), f"{BLOCK}[1]",
                                   "closes the server block itself"),
    "close-quoted": (block("whoami", '"}"'), f"{BLOCK}[1]", "closes the server block itself"),
    # "Unexpected '}' because no matching opening brace"
    "close-after-a-word": (block("whoami }"), f"{BLOCK}[0]", "closes no '{'"),
    "left-open": (block("forward . 10.0.0.2 {", "max_concurrent 5"), f"{BLOCK}[1]", "left open"),
    # "plugin/cache: this plugin can only be used once per Server Block"
    "cache-twice": (block("cache 30", "log", "cache 60"), f"{BLOCK}[2]", "cache is in this block twice"),
    "errors-twice": (block("errors", "errors"), f"{BLOCK}[1]", "errors is in this block twice"),
    # "plugin/reload: interval value must be greater or equal to 2s"
    "reload-1s": (block("log", "errors", "reload 1s"), f"{BLOCK}[2]", "reload's interval '1s' is under 2s"),
    "reload-jitter": (block("reload 10s 500ms"), f"{BLOCK}[0]", "reload's jitter '500ms' is under 1s"),
    "reload-jitter-zero": (block("reload 30s 0s"), f"{BLOCK}[0]", "reload's jitter '0s' is under 1s"),
    "reload-not-a-duration": (block("reload 10"), f"{BLOCK}[0]", "is no Go duration"),
    # "plugin/cache: cache TTL can not be zero or negative: 0"
    "cache-0": (block("cache 0"), f"{BLOCK}[0]", "cache's TTL '0' is not above 0"),
    "cache-negative": (block("cache -5 example.org"), f"{BLOCK}[0]", "cache's TTL '-5' is not above 0"),
    # Z37: CoreDNS serves the key 10.32.0.0/16 as 32.10.in-addr.arpa, the service range's reverse zone
    "cidr-key-service-range": (HOSTS + component("coreDns", "{extraServerBlocks: {'10.32.0.0/16': [whoami]}}"),
                               f"{DNS}.extraServerBlocks.10.32.0.0/16", "overlaps the pod or service range"),
    "cidr-key-inside-pod-range": (HOSTS + component("coreDns", "{extraServerBlocks: {'10.200.3.0/24:53': [whoami]}}"),
                                  f"{DNS}.extraServerBlocks.10.200.3.0/24:53", "overlaps the pod or service range"),
    # Z27: CoreDNS's own Service; a block has no `loop` plugin, so queries go round until they time out
    "forward-to-own-service": (block("forward . 10.32.0.10"), f"{BLOCK}[0]", "is the cluster DNS service"),
    "forward-to-own-service-scheme": (block("log", "forward . 10.0.0.2 dns://10.32.0.10:53"), f"{BLOCK}[1]",
                                      "is the cluster DNS service"),
    # Z05: the kubernetes Service's address takes 443/TCP only
    "upstream-api-service-ip": (HOSTS + component("coreDns", "{upstream: ['10.32.0.1']}"), f"{DNS}.upstream[0]",
                                "is the API server's service IP"),
    "stub-api-service-ip": (HOSTS + component("coreDns", "{stubDomains: {corp.example: ['10.32.0.1:53']}}"),
                            f"{DNS}.stubDomains.corp.example[0]", "is the API server's service IP"),
    "forward-to-api-service-ip": (block("forward . 10.32.0.1"), f"{BLOCK}[0]", "is the API server's service IP"),
    # Z48: "plugin/forward: invalid address" once {$EVIL} is replaced by nothing
    "environment-reference": (block("forward . {$EVIL}"), f"{BLOCK}[0]", "pod's environment"),
    "environment-reference-windows": (block("forward . {%KUBERNETES_SERVICE_HOST%}"), f"{BLOCK}[0]",
                                      "pod's environment"),
    # import: "File to import not found: x"; "Import takes only one argument"
    "import-missing-file": (block("import x", "whoami"), f"{BLOCK}[0]", "File to import not found"),
    "import-missing-absolute-file": (block("import /etc/coredns/custom.server"), f"{BLOCK}[0]",
                                     "File to import not found"),
    "import-two-arguments": (block("import a b"), f"{BLOCK}[0]", "import takes one file or glob"),
    "import-two-wildcards": (block("import /etc/*/*.server"), f"{BLOCK}[0]", "one wildcard"),
}

ACCEPTED: dict[str, str] = {
    # nested blocks, and braces in a quoted word or a comment
    "nested-blocks": block("forward . 10.0.0.2 {", "max_concurrent 5", "}", "cache 30 {",
                           "success 1000", "}", "log"),
    "quoted-placeholders": block('log . "{remote} {name} {rcode}"', "whoami"),
    "comment-with-brace": block("whoami", "# } not a brace", ""),
    # CoreDNS 1.13.1 starts with two forwards in a block (Z12): forward is no once-only plugin
    "forward-twice": block("forward . 10.0.0.2", "forward . 10.0.0.3"),
    "reload-bounds": block("reload 2s 1s", "log"),
    "cache-positive-and-zone": block("cache 30 example.org"),
    "cache-zone-only": block("cache example.org"),
    # Z16: import is a Corefile directive; a glob that matches nothing is a warning in CoreDNS
    "import-glob": block("import /etc/coredns/custom/*.server", "whoami"),
    "cidr-key-elsewhere": HOSTS + component("coreDns", "{extraServerBlocks: {'10.0.0.0/24': [whoami], "
                                                       "'192.168.0.0/16': [whoami]}}"),
    "forward-to-another-resolver": block("forward . dns://10.0.0.53 tls://10.0.0.54"),
    "upstream-next-to-api-ip": HOSTS + component("coreDns", "{upstream: ['10.32.0.2', '10.0.0.53']}"),
}


@pytest.fixture(scope="module", autouse=True)
def warm(tmp_path_factory: pytest.TempPathFactory) -> None:
    path = tmp_path_factory.mktemp("warm") / "c.yaml"
    path.write_text(HEAD + HOSTS)
    assert kubesmith("validate", str(path)).returncode == 0


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_block_coredns_refuses_or_reads_otherwise_is_one_located_error(name: str, tmp_path: Path) -> None:
    text, path, fragment = CASES[name]
    (tmp_path / f"{name}.yaml").write_text(HEAD + text)
    with bounded(BOUND_SECONDS):
        result = kubesmith("validate", f"{name}.yaml", cwd=tmp_path)
    assert_one_located_error(result, f"{name}.yaml", path, fragment)


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_the_legitimate_neighbour_stays_valid(name: str, tmp_path: Path) -> None:
    (tmp_path / f"{name}.yaml").write_text(HEAD + ACCEPTED[name])
    with bounded(BOUND_SECONDS):
        result = kubesmith("validate", f"{name}.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "error" not in result.stderr, result.stderr


def test_another_image_may_hold_the_imported_file(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(HEAD + block("import /etc/coredns-extra/zones.server").replace(
        "{extraServerBlocks", "{image: 'registry.example/coredns:1.13.1', extraServerBlocks"))
    result = kubesmith("validate", "c.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "warning" in result.stderr and "File to import not found" in result.stderr, result.stderr
