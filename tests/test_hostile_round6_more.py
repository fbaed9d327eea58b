"""Hostile input, round 6 (issue 32), what the round's helper still found accepted: etcd switches that weaken
it (--strict-reconfig-check off, the v2 API on) in every Go spelling of the boolean, Pod Security admission
turned off, and addresses in a second spelling (an IPv4 range written IPv4-mapped in nodePortAddresses, a
CoreDNS resolver written IPv4-mapped, with a zone or in brackets without a port). Each is one located error,
exit 1; its legitimate neighbour stays valid.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from test_hostile_round4_consumers import HEAD_136
from test_hostile_round6_values import etcd, proxy
from test_hostile_values import HOSTS, component
from hostile_support import assert_refused_alone, assert_valid
from hostile_support import warm  # noqa: F401 (the module's autouse fixture)

ETCD, APISERVER = "spec.components.etcd", "spec.components.apiserver"
PROXY, COREDNS = "spec.components.proxy", "spec.components.coreDns"
GO_FALSE = ("0", "f", "F", "FALSE", "false", "False")
GO_TRUE = ("1", "t", "T", "TRUE", "true", "True")


def apiserver(body: str) -> str:
    return HOSTS + component("apiserver", body)


def core_dns(body: str) -> str:
    return HOSTS + component("coreDns", body)


def block(*lines: str) -> str:
    return core_dns("{extraServerBlocks: {example.org: [%s]}}" % ", ".join(f"'{line}'" for line in lines))


# name -> (what follows `spec.kubernetesVersion: "1.36.2"`, option path of the one error, message fragment)
CASES: dict[str, tuple[str, str, str]] = {
    # etcd's guard against a member change that loses quorum, off: every spelling Go's ParseBool reads as false
    **{f"etcd-strict-reconfig-off-{index}-{text}": (etcd(f"{{extraArgs: {{strict-reconfig-check: '{text}'}}}}"),
                                                    f"{ETCD}.extraArgs.strict-reconfig-check", "loses quorum")
       for index, text in enumerate(GO_FALSE)},
    "etcd-strict-reconfig-off-yaml-bool": (etcd("{extraArgs: {strict-reconfig-check: false}}"),
                                           f"{ETCD}.extraArgs.strict-reconfig-check", "loses quorum"),
    "etcd-strict-reconfig-off-yaml-int": (etcd("{extraArgs: {strict-reconfig-check: 0}}"),
                                          f"{ETCD}.extraArgs.strict-reconfig-check", "loses quorum"),
    # the v2 API, without the v3 API's authentication: every spelling of true
    **{f"etcd-enable-v2-{index}-{text}": (etcd(f"{{extraArgs: {{enable-v2: '{text}'}}}}"),
                                          f"{ETCD}.extraArgs.enable-v2", "v2 API")
       for index, text in enumerate(GO_TRUE)},
    "etcd-enable-v2-yaml-bool": (etcd("{extraArgs: {enable-v2: true}}"), f"{ETCD}.extraArgs.enable-v2", "v2 API"),
    # Pod Security admission off: alone, or in a list with others
    "apiserver-disable-pod-security": (apiserver("{extraArgs: {disable-admission-plugins: PodSecurity}}"),
                                       f"{APISERVER}.extraArgs.disable-admission-plugins", "disables PodSecurity"),
    "apiserver-disable-pod-security-in-list": (apiserver("{extraArgs: {disable-admission-plugins: "
                                                         "'DefaultStorageClass,PodSecurity,StorageObjectInUseProtection'}}"),
                                               f"{APISERVER}.extraArgs.disable-admission-plugins",
                                               "disables PodSecurity"),
    # other spellings of the list: the CSV reader's quoting and a space are refused before the plugins are read
    "apiserver-disable-pod-security-quoted": (apiserver("{extraArgs: {disable-admission-plugins: '\"PodSecurity\"'}}"),
                                              f"{APISERVER}.extraArgs.disable-admission-plugins", "quotes or whitespace"),
    "apiserver-disable-pod-security-spaced": (apiserver("{extraArgs: {disable-admission-plugins: "
                                                        "'DefaultStorageClass, PodSecurity'}}"),
                                              f"{APISERVER}.extraArgs.disable-admission-plugins", "quotes or whitespace"),
    "apiserver-disable-pod-security-yaml-list": (apiserver("{extraArgs: {disable-admission-plugins: [PodSecurity]}}"),
                                                 f"{APISERVER}.extraArgs.disable-admission-plugins", "got a list"),
    # nodePortAddresses: an IPv4 range written IPv4-mapped, a zone (Go's net.ParseCIDR refuses it)
    "proxy-node-ports-ipv4-mapped": (proxy("{extraConfig: {nodePortAddresses: ['::ffff:10.0.0.0/104']}}"),
                                     f"{PROXY}.extraConfig.nodePortAddresses[0]", "write '10.0.0.0/8'"),
    "proxy-node-ports-ipv4-mapped-host": (proxy("{extraConfig: {nodePortAddresses: ['10.1.0.0/16', "
                                                "'::ffff:10.0.0.11/128']}}"),
                                          f"{PROXY}.extraConfig.nodePortAddresses[1]", "write '10.0.0.11/32'"),
    "proxy-node-ports-zone": (proxy("{extraConfig: {nodePortAddresses: ['fe80::%eth0/64']}}"),
                              f"{PROXY}.extraConfig.nodePortAddresses[0]", "zone suffix"),
    # CoreDNS: a resolver in brackets without a port ("not an IP address or file": CoreDNS stops)
    "coredns-upstream-brackets-no-port": (core_dns("{upstream: ['[2001:db8::1]']}"), f"{COREDNS}.upstream[0]",
                                          "write '2001:db8::1' (or '[2001:db8::1]:53')"),
    "coredns-stub-brackets-no-port": (core_dns("{stubDomains: {corp.example: ['10.0.0.53', '[2001:db8::53]']}}"),
                                      f"{COREDNS}.stubDomains.corp.example[1]", "brackets but no port"),
    # an extra block's forward: the same spellings as the resolvers'
    "coredns-block-forward-ipv4-mapped": (block("forward . ::ffff:8.8.8.8"),
                                          f"{COREDNS}.extraServerBlocks.example.org[0]", "write '8.8.8.8'"),
    "coredns-block-forward-mapped-tls-port": (block("forward . 1.1.1.1 tls://[::ffff:1.1.1.1]:853",
                                                    "cache 30"),
                                              f"{COREDNS}.extraServerBlocks.example.org[0]", "write '1.1.1.1'"),
    "coredns-block-forward-brackets-no-port": (block("cache 30", "forward . [2001:db8::1]"),
                                               f"{COREDNS}.extraServerBlocks.example.org[1]",
                                               "write '2001:db8::1'"),
    "coredns-block-forward-zone": (block("forward . fe80::1%eth0"), f"{COREDNS}.extraServerBlocks.example.org[0]",
                                   "zone suffix"),
    # both places set, extraConfig's value invalid: one error, the duplicate (not also the value)
    "proxy-metrics-twice-invalid": (proxy("{metricsBindAddress: '127.0.0.1:10249', extraConfig: "
                                          "{metricsBindAddress: 'x:y'}}"),
                                    f"{PROXY}.extraConfig.metricsBindAddress", "already sets"),
}

# name -> what follows `spec.kubernetesVersion: "1.36.2"`: valid, and without a warning about it
LEGITIMATE: dict[str, str] = {
    # the harmless position of each switch, in Go's spellings
    "etcd-switches-harmless": etcd("{extraArgs: {strict-reconfig-check: 'TRUE', enable-v2: 'f'}}"),
    "etcd-switches-yaml-bools": etcd("{extraArgs: {strict-reconfig-check: true, enable-v2: false}}"),
    "apiserver-disable-other-plugins": apiserver("{extraArgs: {disable-admission-plugins: "
                                                 "'DefaultStorageClass,StorageObjectInUseProtection'}}"),
    "proxy-node-ports-canonical": proxy("{extraConfig: {nodePortAddresses: ['10.0.0.0/8', 'fd00::/64', "
                                        "'::ffff:0:0/80']}}"),
    "coredns-resolvers-canonical": core_dns("{upstream: ['2001:db8::1', '[2001:db8::2]:53', '8.8.8.8:53'], "
                                            "stubDomains: {corp.example: ['10.0.0.53']}}"),
    "coredns-block-forward-canonical": block("forward . 2001:db8::1 [2001:db8::2]:53 tls://9.9.9.9 {",
                                             "  tls_servername dns.quad9.net", "}", "cache 30"),
    "proxy-metrics-once": proxy("{metricsBindAddress: '127.0.0.1:10249', extraConfig: {bindAddress: 0.0.0.0}}"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_hostile_input_is_one_located_error(name: str, tmp_path: Path) -> None:
    text, path, fragment = CASES[name]
    assert_refused_alone(tmp_path, name, HEAD_136 + text, path, fragment)


@pytest.mark.parametrize("name", sorted(LEGITIMATE))
def test_the_legitimate_neighbour_stays_valid(name: str, tmp_path: Path) -> None:
    result = assert_valid(tmp_path, name, HEAD_136 + LEGITIMATE[name])
    assert "warning" not in result.stderr, result.stderr
