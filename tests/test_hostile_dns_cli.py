"""Hostile input (issue 32, audit round 3): CoreDNS zones and directives, the agent's CA URLs,
near-zero durations, empty or over-long command-line paths and names, and messages that must stay
one readable, located line. Each hostile case ends in one located error (cluster file: option path
and file:line:col, exit 1; command line: the flag, exit 2) and no traceback; the legitimate
neighbours stay valid.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import ROOT, kubesmith
from hostile_support import assert_one_located_error, assert_refused, assert_valid
from test_hostile_values import HEAD, HOSTS, component

DNS = "spec.components.coreDns"
HIJACK = "overlaps the cluster domain 'cluster.local'"
REVERSE = "overlaps the pod or service range"
LONG = "a" * 100_000

# name -> (what follows `spec.kubernetesVersion`, option path of the first error, message fragment)
CASES: dict[str, tuple[str, str, str]] = {
    "dns-stub-cluster-domain": (HOSTS + component("coreDns", "{stubDomains: {cluster.local: [10.0.0.2]}}"),
                                f"{DNS}.stubDomains.cluster.local", HIJACK),
    "dns-stub-inside-cluster-domain": (HOSTS + component("coreDns", "{stubDomains: {svc.cluster.local: [10.0.0.2]}}"),
                                       f"{DNS}.stubDomains.svc.cluster.local", "overlaps the cluster domain"),
    "dns-stub-parent-of-cluster-domain": (HOSTS + component("coreDns", "{stubDomains: {local: [10.0.0.2]}}"),
                                          f"{DNS}.stubDomains.local", HIJACK),
    "dns-block-cluster-domain": (HOSTS + component("coreDns", "{extraServerBlocks: {cluster.local: [whoami]}}"),
                                 f"{DNS}.extraServerBlocks.cluster.local", HIJACK),
    "dns-block-cluster-domain-port-dot": (HOSTS + component("coreDns", "{extraServerBlocks: {'Cluster.Local.:53': "
                                                                       "[whoami]}}"),
                                          f"{DNS}.extraServerBlocks.Cluster.Local.:53", HIJACK),
    # stub zones are normalised as CoreDNS reads them (case, final dot): the hijack is still seen
    "dns-stub-cluster-domain-case-dot": (HOSTS + component("coreDns", "{stubDomains: {'Cluster.Local.': [10.0.0.2]}}"),
                                         f"{DNS}.stubDomains.Cluster.Local.", HIJACK),
    "dns-stub-pod-reverse-case": (HOSTS + component("coreDns", "{stubDomains: {'200.10.IN-ADDR.ARPA.': [10.0.0.2]}}"),
                                  f"{DNS}.stubDomains.200.10.IN-ADDR.ARPA.", REVERSE),
    "dns-stub-same-zone-twice": (HOSTS + component("coreDns", "{stubDomains: {consul: [10.0.0.2], "
                                                              "'Consul.': [10.0.0.3]}}"),
                                 f"{DNS}.stubDomains.consul", "is already served by"),
    "dns-stub-not-a-zone": (HOSTS + component("coreDns", "{stubDomains: {'corp..example': [10.0.0.2]}}"),
                            f"{DNS}.stubDomains.corp..example.[key]", "must be a DNS zone"),
    "dns-block-not-a-zone": (HOSTS + component("coreDns", "{extraServerBlocks: {'corp/example': [whoami]}}"),
                             f"{DNS}.extraServerBlocks.corp/example", "must be a DNS zone"),
    "dns-stub-in-addr-arpa": (HOSTS + component("coreDns", "{stubDomains: {'in-addr.arpa': [10.0.0.2]}}"),
                              f"{DNS}.stubDomains.in-addr.arpa", REVERSE),
    "dns-stub-pod-reverse": (HOSTS + component("coreDns", "{stubDomains: {'200.10.in-addr.arpa': [10.0.0.2]}}"),
                             f"{DNS}.stubDomains.200.10.in-addr.arpa", REVERSE),
    "dns-block-ip6-arpa-v6-cluster": (
        "  hosts:\n    - {name: h1, address: 'fd00::11', roles: [control-plane, etcd, node]}\n"
        "  network: {clusterCidr: 'fd01::/48', serviceCidr: 'fd02::/112'}\n"
        "  components: {podNetwork: {enabled: false}, coreDns: {extraServerBlocks: {'ip6.arpa': [whoami]}}}\n",
        f"{DNS}.extraServerBlocks.ip6.arpa", REVERSE),
    "dns-second-root-block": (HOSTS + component("coreDns", "{extraServerBlocks: {'.': ['forward . 10.0.0.2']}}"),
                              f"{DNS}.extraServerBlocks..", "is already served by the built-in block"),
    "dns-duplicate-zone": (HOSTS + component("coreDns", "{stubDomains: {corp.example: [10.0.0.53]}, "
                                                        "extraServerBlocks: {'corp.example.': [whoami]}}"),
                           f"{DNS}.extraServerBlocks.corp.example.", "is already served by "
                                                                     f"{DNS}.stubDomains.corp.example"),
    "dns-unknown-plugin": (HOSTS + component("coreDns", "{extraServerBlocks: {example.org: [bogusplugin]}}"),
                           f"{DNS}.extraServerBlocks.example.org[0]", "'bogusplugin' is not a plugin of CoreDNS"),
    "dns-unknown-plugin-short": (HOSTS + component("coreDns", "{extraServerBlocks: {a: [b]}}"),
                                 f"{DNS}.extraServerBlocks.a[0]", "'b' is not a plugin of CoreDNS 1.13.1"),
    "dns-unknown-plugin-after-nested": (HOSTS + component("coreDns", "{extraServerBlocks: {example.org: ["
                                                                     "'forward . 10.0.0.2 {', 'max_concurrent 5', "
                                                                     "'}', 'import x']}}"),
                                        f"{DNS}.extraServerBlocks.example.org[3]", "File to import not found"),
    "dns-block-two-zones": (HOSTS + component("coreDns", "{extraServerBlocks: {'x.org,cluster.local': [whoami]}}"),
                            f"{DNS}.extraServerBlocks.x.org,cluster.local", "one zone: no spaces, commas or braces"),
    **{f"agent-ca-url-{label}": (HOSTS + component("agent", f"{{caUrls: [{url}]}}"),
                                 "spec.components.agent.caUrls[0]", fragment)
       for label, url, fragment in (
           ("http", "'http://10.0.0.11:8443'", "must start with https://"),
           ("ftp", "'ftp://10.0.0.11:8443'", "must start with https://"),
           ("userinfo", "'https://user:pw@10.0.0.11:8443'", "carries user information"),
           ("empty", "''", "is empty"),
           ("blank", "' '", "is empty"),
           ("no-host", "'https://:8443'", "names no host"),
           ("fragment", "'https://ca.example:8443/#x'", "has a query or fragment"),
           ("query", "'https://ca.example:8443/?a=b'", "has a query or fragment"),
           ("bad-port", "'https://ca.example:99999'", "is not a URL"))},
    **{f"dur-{label}": (HOSTS + component(name, body), path, f"is shorter than {minimum}")
       for label, name, body, path, minimum in (
           ("event-ttl-ns", "apiserver", "{eventTtl: 1ns}", "spec.components.apiserver.eventTtl", "1m"),
           ("event-ttl-us", "apiserver", "{eventTtl: '1µs'}", "spec.components.apiserver.eventTtl", "1m"),
           ("event-ttl-ms", "apiserver", "{eventTtl: 1ms}", "spec.components.apiserver.eventTtl", "1m"),
           ("signing-ns", "controllerManager", "{signingDuration: 1ns}",
            "spec.components.controllerManager.signingDuration", "1h"),
           ("signing-59m", "controllerManager", "{signingDuration: 59m59s}",
            "spec.components.controllerManager.signingDuration", "1h"),
           ("idle-ns", "kubelet", "{streamingConnectionIdleTimeout: 1ns}",
            "spec.components.kubelet.streamingConnectionIdleTimeout", "1m"),
           ("idle-config-ms", "kubelet", "{extraConfig: {streamingConnectionIdleTimeout: 1ms}}",
            "spec.components.kubelet.extraConfig.streamingConnectionIdleTimeout", "1m"),
           ("idle-flag-s", "kubelet", "{extraArgs: {streaming-connection-idle-timeout: 1s}}",
            "spec.components.kubelet.extraArgs.streaming-connection-idle-timeout", "1m"),
           ("snapshot-interval", "etcd", "{snapshots: {interval: 1s}}",
            "spec.components.etcd.snapshots.interval", "5m"),
           ("ca-validity", "caService", "{validity: 0.5h}", "spec.components.caService.validity", "1h"),
           ("token-ttl", "caService", "{tokenTtl: 1s}", "spec.components.caService.tokenTtl", "1m"))},
    **{f"path-long-{option}": (HOSTS + f"  ssh: {{{option}: '{LONG}'}}\n", f"spec.ssh.{option}",
                               "is longer than 4095 bytes")
       for option in ("configFile", "knownHostsFile", "identityFile")},
    "path-long-component": (HOSTS + f"  ssh: {{identityFile: '/root/{'b' * 256}'}}\n", "spec.ssh.identityFile",
                            "has a component longer than 255 bytes"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_value_gets_one_located_error(name: str, tmp_path: Path) -> None:
    text, path, fragment = CASES[name]
    result = assert_refused(tmp_path, name, HEAD + text, path, fragment)
    assert re.search(rf"^error: {re.escape(path)}: ", result.stderr, re.M), result.stderr
    assert len(result.stderr) < 1000, "a long value is echoed whole"


def test_a_long_value_is_cut_before_its_location(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(HEAD.replace("name: demo", f"name: '{LONG}'") + HOSTS)
    result = kubesmith("validate", "c.yaml", cwd=tmp_path)
    assert_one_located_error(result, "c.yaml", "metadata.name", f"'{'a' * 80}…'(100000 characters) must be")
    assert len(result.stderr) < 400, result.stderr


@pytest.mark.parametrize("character,name", [("\u2028", "line separator (U+2028)"),
                                            ("\u2029", "paragraph separator (U+2029)"),
                                            ("\x85", "next line (U+0085, NEL)")])
def test_a_raw_unicode_line_break_is_named_where_the_editor_shows_it(character: str, name: str,
                                                                      tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(HEAD + f"  # a{character}b\n" + HOSTS, encoding="utf-8")
    result = kubesmith("validate", "c.yaml", cwd=tmp_path)
    assert_one_located_error(result, "c.yaml", "(document)", f"a raw {name}")
    assert "(c.yaml:7:6)" in result.stderr and "syntax error" not in result.stderr, result.stderr


@pytest.mark.parametrize("directive,refused", [("%YAML 1.2", True), ("%YAML 1.1", False)])
def test_a_yaml_1_2_directive_is_refused_as_no_reader_here_keeps_it(directive: str, refused: bool,
                                                                     tmp_path: Path) -> None:
    """Under %YAML 1.2 `on` would be a string; PyYAML (as kubectl) still reads true: refused, not misread."""
    (tmp_path / "c.yaml").write_text(f"{directive}\n---\n" + HEAD + HOSTS +
                                     component("apiserver", "{allowPrivileged: on}"))
    result = kubesmith("validate", "c.yaml", cwd=tmp_path)
    if refused:
        assert_one_located_error(result, "c.yaml", "(document)", "%YAML 1.2: kubesmith reads YAML 1.1")
        assert "(c.yaml:1:1)" in result.stderr, result.stderr
    else:
        assert result.returncode == 0, result.stderr


# name -> what follows `spec.kubernetesVersion`: each stays valid
ACCEPTED: dict[str, str] = {
    "dns-stub-corp": HOSTS + component("coreDns", "{stubDomains: {corp.example: [10.0.0.53]}}"),
    # zones CoreDNS 1.13.1 serves: a final dot, Active Directory's underscore labels, upper case
    "dns-stub-zone-spellings": HOSTS + component("coreDns", "{stubDomains: {'consul.': [10.0.0.53], "
                                                            "'_msdcs.corp.example.com': [10.0.0.53], "
                                                            "'Corp.Example.com': [10.0.0.54]}}"),
    "dns-block-cidr-zone": HOSTS + component("coreDns", "{extraServerBlocks: {'10.0.0.0/24': [whoami]}}"),
    "dns-stub-other-reverse": HOSTS + component("coreDns", "{stubDomains: {'168.192.in-addr.arpa': [10.0.0.53], "
                                                           "'d.f.ip6.arpa': [10.0.0.53]}}"),
    "dns-block-other-port-and-nested": HOSTS + component("coreDns", "{extraServerBlocks: {'.:1053': [whoami], "
                                                                    "'example.org': ['forward . 10.0.0.2 {', "
                                                                    "'max_concurrent 5', '}', 'cache 30', "
                                                                    "'log']}}"),
    "agent-ca-url-https": HOSTS + component("agent", "{caUrls: ['https://ca.example:8443', "
                                                     "'https://[fd00::1]:8443/', 'HTTPS://10.0.0.11']}"),
    "dur-signing-day": HOSTS + component("controllerManager", "{signingDuration: 24h}"),
    "dur-event-ttl-minute": HOSTS + component("apiserver", "{eventTtl: 1m}"),
    "dur-idle-five-minutes": HOSTS + component("kubelet", "{streamingConnectionIdleTimeout: 5m}"),
    "dur-idle-config-two-minutes": HOSTS + component("kubelet", "{extraConfig: {streamingConnectionIdleTimeout: "
                                                                "2m}}"),
    "dur-snapshots-six-hours": HOSTS + component("etcd", "{snapshots: {interval: 6h}}"),
    "dur-ca-validity-day": HOSTS + component("caService", "{validity: 1d, tokenTtl: 10m}"),
    "path-ssh-ordinary": HOSTS + "  ssh: {identityFile: ~/.ssh/id_ed25519, knownHostsFile: known_hosts}\n",
}


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_legitimate_neighbour_stays_valid(name: str, tmp_path: Path) -> None:
    assert_valid(tmp_path, name, HEAD + ACCEPTED[name], bound=False)


def test_a_stub_domain_reaches_the_corefile(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(HEAD + ACCEPTED["dns-stub-corp"])
    plan = kubesmith("plan", "c.yaml", "--offline", "-o", "json", cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr
    assert "corp.example:53 {" in plan.stdout and "forward . 10.0.0.53" in plan.stdout


@pytest.fixture
def cluster_file(tmp_path: Path) -> Path:
    (tmp_path / "c.yaml").write_text((ROOT / "examples" / "single-node.yaml").read_text())
    return tmp_path


# command line -> the flag the error names
COMMAND_LINES: dict[str, tuple[list[str], str, str]] = {
    "render-out-dir-empty": (["render", "c.yaml", "--out-dir", "", "--state-dir", "st"], "'--out-dir'",
                             "'' is empty: give a path"),
    "render-state-dir-empty": (["render", "c.yaml", "--out-dir", "out", "--state-dir", ""], "'--state-dir'",
                               "'' is empty: give a path"),
    "plan-host-empty": (["plan", "c.yaml", "--offline", "--host", ""], "'--host'", "'' is empty: give a name"),
    "plan-host-blank": (["plan", "c.yaml", "--offline", "--host", " "], "'--host'", "is empty: give a name"),
    "plan-host-empty-item": (["plan", "c.yaml", "--offline", "--host", "node1,"], "'--host'",
                             "holds an empty host name"),
    "validate-file-empty": (["validate", ""], "'FILE'", "'' is empty: give a path"),
    "status-state-dir-empty": (["status", "c.yaml", "--state-dir", ""], "'--state-dir'", "is empty"),
    "kubeconfig-out-empty": (["kubeconfig", "create", "c.yaml", "alice", "--out", ""], "'--out'", "is empty"),
    "render-out-dir-too-long": (["render", "c.yaml", "--out-dir", "o" * 5000], "'--out-dir'",
                                "is longer than 4095 bytes"),
    "render-ssh-config-component": (["render", "c.yaml", "--out-dir", "out", "--ssh-config", "x" * 300],
                                    "'--ssh-config'", "has a component longer than 255 bytes"),
}


@pytest.mark.parametrize("name", sorted(COMMAND_LINES))
def test_an_empty_or_overlong_path_or_name_names_its_flag(name: str, cluster_file: Path) -> None:
    args, flag, fragment = COMMAND_LINES[name]
    result = kubesmith(*args, cwd=cluster_file)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert f"Invalid value for {flag}" in result.stderr and fragment in result.stderr, result.stderr
    assert len(result.stderr) < 1000, result.stderr
    assert not (cluster_file / "out").exists()


def test_the_current_directory_is_written_as_dot(cluster_file: Path) -> None:
    result = kubesmith("plan", "c.yaml", "--offline", "--host", "node1", cwd=cluster_file)
    assert result.returncode == 0, result.stderr


def test_a_newline_in_a_missing_file_name_is_escaped(tmp_path: Path) -> None:
    result = kubesmith("validate", "a\nb.yaml", cwd=tmp_path)
    assert result.returncode == 3
    assert result.stderr.splitlines() == ["error: a\\x0ab.yaml: no such file"], result.stderr


@pytest.mark.parametrize("url,fragment", [("http://10.0.0.11:8443", "must start with https://"),
                                          ("https://u:p@10.0.0.11:8443", "carries user information"),
                                          ("", "is empty")])
def test_the_agents_ca_url_flag_follows_the_cluster_files_rule(url: str, fragment: str, tmp_path: Path) -> None:
    result = kubesmith("agent", "--once", "--state-file", str(tmp_path / "s.json"), "--ca-url", url, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "Invalid value for '--ca-url'" in result.stderr and fragment in result.stderr, result.stderr
