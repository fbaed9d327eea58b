"""The control plane's virtual IP (`spec.controlPlaneVIP`): one address for operators and anything outside
the cluster, held by one control-plane host at a time and moved within seconds when that host or its API
server dies.

Debian's keepalived speaks VRRP between the control-plane hosts (unicast: to each other's addresses, so
the network need not carry multicast). Every host starts as BACKUP without preemption: the address stays
where it is while its holder is healthy (a host coming back does not take it away again). A track script
asks this host's own API server for /readyz every interval; `fall` failures in a row put the instance in
FAULT, which gives the address up at once (it announces priority 0), and a peer takes it over. A holder
that dies altogether stops announcing; its peers take over after three announcement intervals.

The track script is curl, or Python's standard library where a host has no curl (hosts need python3
already, see README): `kubesmith wait` would do, but starting it every second on every control-plane host
costs more CPU than the check itself. It presents kubesmith's health-check client certificate, since
anonymous requests are refused.

Nodes do not use the address: their local load balancer reaches every API server without it (see
modules/api_load_balancer.py). The API server certificate carries it (it is the cluster's endpoint).
"""

from __future__ import annotations

import shlex

from pydantic import Field

from kubesmith import layout
from kubesmith.modules.base import Module
from kubesmith.pki.certlist import authority, certificate
from kubesmith.vocabulary.facts import Contribution, HostContext
from kubesmith.vocabulary.model import File, Service
from kubesmith.vocabulary.types import InterfaceName, StrictModel
from kubesmith.urls import url_host

SERVICE = "kube-api-vip"
DIRECTORY = f"{layout.KUBESMITH_ETC}/vip"
CONFIG_PATH = f"{DIRECTORY}/keepalived.conf"
CHECK_PATH = f"{DIRECTORY}/check-apiserver"
CHECK_CERTIFICATE = "kube-healthcheck-client"


class ControlPlaneVipOptions(StrictModel):
    binary: str = Field(default="/usr/sbin/keepalived", pattern="^/", description="keepalived on the control-plane "
                        "hosts (Debian's package); apply does not ship it. Used only with spec.controlPlaneVIP.")
    interface: InterfaceName = Field(default="eth0", description="Network interface that "
                           "carries the control-plane hosts' addresses and takes the virtual IP.")
    virtual_router_id: int = Field(default=51, ge=1, le=255, description="VRRP router id: unique among the VRRP "
                                   "groups of the network.")
    advert_interval: int = Field(default=1, ge=1, le=10, description="Seconds between VRRP announcements; a holder "
                                 "that stops announcing is replaced after three.")
    # Each check is an mTLS handshake with the API server: once a second it cost each control-plane host
    # 2.5% of a core (keepalived's cgroup, 0.74 CPU-s in 30 s; 0.25 at every 3 s). kubeadm's HA guide
    # also checks every 3 s; with fall 2 the address moves within about 6 s of a failed API server.
    check_interval: int = Field(default=3, ge=1, le=60, description="Seconds between checks of the host's own API "
                                "server (/readyz); `fall` failed checks in a row give the address up.")
    fall: int = Field(default=2, ge=1, le=10, description="Failed checks in a row that give the address up.")
    rise: int = Field(default=2, ge=1, le=10, description="Passed checks in a row before the host may hold it again.")


class ControlPlaneVipModule(Module):
    key = "control_plane_vip"
    position = 110
    title = "virtual IP of the control plane (keepalived)"
    options = ControlPlaneVipOptions
    roles = frozenset({"control-plane"})

    def contribute(self, ctx: HostContext, options: ControlPlaneVipOptions) -> Contribution:
        vip = ctx.cluster.vip
        if vip is None:
            return Contribution()
        check = File(path=CHECK_PATH, mode=0o755, content=check_script(ctx))
        config = File(path=CONFIG_PATH, mode=0o600, content=keepalived_config(ctx, options, vip))
        pids = f"/run/{SERVICE}"
        service = Service(
            name=SERVICE,
            component=self.key,
            description="kubesmith: the control plane's virtual IP (keepalived, VRRP)",
            binary=options.binary,
            argv=("--vrrp", "--dont-fork", "--log-console", f"--use-file={CONFIG_PATH}",
                  f"--pid={pids}/keepalived.pid", f"--vrrp_pid={pids}/vrrp.pid"),
            user="root",
            group="root",
            wanted_by="kubernetes.target",
            after=("network-online.target", "kube-apiserver.service"),
            needs_files=(CONFIG_PATH, CHECK_PATH),
            hardening=False,  # VRRP needs raw sockets, netlink and the right to add addresses: root's network
            unit_settings=(("RuntimeDirectory", SERVICE),),
        )
        return Contribution(services=[service], files=[config, check], certificates=[CHECK_CERTIFICATE])


def keepalived_config(ctx: HostContext, options: ControlPlaneVipOptions, vip: str) -> str:
    """One host's keepalived.conf: its own address as the source, the other control-plane hosts as peers."""
    host = ctx.host
    peers = [cp.address for cp in ctx.cluster.control_plane if cp.name != host.name]
    rank = [cp.name for cp in ctx.cluster.control_plane].index(host.name)
    prefix = 32 if ":" not in vip else 128
    return "\n".join([
        f"# {SERVICE}: generated by kubesmith for host {host.name}",
        "global_defs {",
        f"    router_id {host.name}",
        "    enable_script_security",
        "    script_user root",
        "}",
        "vrrp_script apiserver {",
        f"    script \"{CHECK_PATH}\"",
        f"    interval {options.check_interval}",
        f"    timeout {options.check_interval + 2}",
        f"    fall {options.fall}",
        f"    rise {options.rise}",
        "}",
        "vrrp_instance kube-api {",
        "    state BACKUP",
        "    nopreempt",
        f"    interface {options.interface}",
        f"    virtual_router_id {options.virtual_router_id}",
        f"    priority {200 - rank}",  # distinct priorities: the first healthy host wins a fresh election
        f"    advert_int {options.advert_interval}",
        f"    unicast_src_ip {host.address}",
        "    unicast_peer {",
        *(f"        {peer}" for peer in peers),
        "    }",
        "    virtual_ipaddress {",
        f"        {vip}/{prefix} dev {options.interface}",
        "    }",
        "    track_script {",
        "        apiserver",
        "    }",
        "}",
        "",
    ])


def check_script(ctx: HostContext) -> str:
    """Exit 0 when this host's API server answers /readyz to kubesmith's health-check certificate.

    keepalived runs it every second on every control-plane host, so its start-up is the cost: curl takes
    26 ms of CPU a check on a lab host, Python's standard library 113 ms (urllib) or 68 ms (ssl alone). The
    script uses curl where the host has it, else Python (which hosts have: see README)."""
    client = certificate(CHECK_CERTIFICATE)
    ca = layout.pki_path(authority("kubernetes-ca").cert_file)
    address, port = ctx.host.address, ctx.cluster.api_port
    url = f"https://{url_host(address)}:{port}/readyz"
    curl = ["curl", "--silent", "--fail", "--max-time", "2", "--output", "/dev/null", "--cacert", ca,
            "--cert", client.cert_path, "--key", client.key_path, url]
    return "\n".join([
        "#!/bin/sh",
        f"# kubesmith: keepalived's track script on {ctx.host.name}; exit 0 when {url} answers ok",
        f"command -v curl >/dev/null 2>&1 && exec {shlex.join(curl)}",
        "exec /usr/bin/python3 -I -S - <<'EOF'",
        "import socket, ssl, sys",
        "context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)",
        f"context.load_verify_locations({ca!r})",
        f"context.load_cert_chain({client.cert_path!r}, {client.key_path!r})",
        "try:",
        f"    with socket.create_connection(({address!r}, {port}), timeout=2) as raw, \\",
        f"            context.wrap_socket(raw, server_hostname={address!r}) as tls:",
        f"        tls.sendall(b'GET /readyz HTTP/1.1\\r\\nHost: {url_host(address)}\\r\\nConnection: close\\r\\n\\r\\n')",
        "        status = tls.makefile('rb').readline()",
        "    sys.exit(0 if status.startswith(b'HTTP/1.1 200') else 1)",
        "except (OSError, ssl.SSLError):",
        "    sys.exit(1)",
        "EOF",
        "",
    ])


MODULE = ControlPlaneVipModule()
