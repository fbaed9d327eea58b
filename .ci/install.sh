#!/usr/bin/env bash
# Everything the test suite needs on a fresh Debian machine (run as root).
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends \
    openssl ca-certificates iproute2 iptables conntrack kmod zstd systemd systemd-container mmdebstrap \
    openssh-client openssh-server golang-cfssl containerd runc containernetworking-plugins busybox-static \
    gcc libc6-dev haproxy keepalived faketime python3-minimal \
    >/dev/null
python3 -m pip install -q --disable-pip-version-check -e '.[test]'
# An editable install leaves kubesmith's own modules without bytecode, and with PYTHONDONTWRITEBYTECODE
# set (as on this project's machines) every `kubesmith` the tests start compiled about 110 of them
# again: 0.25-0.35 CPU-s a start. Python still reads bytecode it did not write, and ignores a stale one.
python3 -m compileall -q -j 0 src tests >/dev/null
# The real Kubernetes binaries (both releases, for the upgrade tests) and CoreDNS, unpacked once per
# machine (tests/k8s_support.py asks the same script for the directories).
bash ../shared/k8s/install.sh >/dev/null
bash ../shared/k8s/install.sh --version v1.35.6 >/dev/null
bash ../shared/k8s/install.sh --coredns >/dev/null
