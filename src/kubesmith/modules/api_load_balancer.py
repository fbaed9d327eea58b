"""The node-local load balancer: every host without an API server of its own reaches them all through it.

The kubespray and k0s approach. Without it, a node's kubelet and kube-proxy name one API server (the
first control-plane host's, or `controlPlaneEndpoint`) and lose the API with that host. With it they
name https://127.0.0.1:<port>, where Debian's HAProxy forwards each new TCP connection to an API
server that answered its last health checks. TLS passes through untouched: clients still verify
the API server's certificate (it carries 127.0.0.1) and present their own.

Health checks: `GET /readyz` over TLS, verified against kubernetes-ca. kubesmith runs the API server
without anonymous access, so an unauthenticated /readyz is refused (401); the checks present a client
certificate of their own, `api-lb-client` (CN kubesmith:api-lb, no groups: /readyz is open to every
authenticated user through system:public-info-viewer, and nothing else is). When a server is marked
down its open sessions are closed (`on-marked-down shutdown-sessions`), so a kubelet whose API server
vanished without a reset (a host that lost power) reconnects at once instead of waiting for TCP.

The unit runs as a dynamic user, sandboxed; systemd hands it the root-only client key as a credential
(`LoadCredential=`), so no user on the host owns that key. A second listener on loopback answers
`/readyz` (503 once no API server is up: the unit's readiness) and `/stats` (each backend's state,
which `kubesmith status` shows).
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass

from pydantic import Field

from kubesmith import layout
from kubesmith.modules.base import Module
from kubesmith.pki.certlist import authority, certificate
from kubesmith.vocabulary.facts import Contribution, HostContext, HostFacts
from kubesmith.vocabulary.model import File, Probe, Service
from kubesmith.vocabulary.types import Port, StrictModel
from kubesmith.urls import url_host

SERVICE = "kube-api-lb"
CONFIG_PATH = f"{layout.KUBESMITH_ETC}/api-lb/haproxy.cfg"
CREDENTIALS = f"/run/credentials/{SERVICE}.service"  # systemd's $CREDENTIALS_DIRECTORY for the unit
CERTIFICATE = "api-lb-client"
BACKEND = "kube-apiservers"
STATS_PATH = "/stats;csv;norefresh"  # HAProxy's stats page as CSV


# HAProxy's timers are milliseconds in a signed 32-bit int: "timer overflow ... maximum value is 2147483647 ms
# (~24.8 days)", and it refuses its configuration
MAX_TIMEOUT_SECONDS = 2147483


class ApiLoadBalancerOptions(StrictModel):
    enabled: bool = Field(default=True, description="Run a local load balancer (HAProxy) on every host without an "
                          "API server of its own; its kubelet and kube-proxy reach the API through it.")
    binary: str = Field(default="/usr/sbin/haproxy", pattern="^/", description="HAProxy on the host (Debian's "
                        "package); apply does not ship it.")
    port: Port = Field(default=7443, description="Port on 127.0.0.1 that the node's components use for the API.")
    monitor_port: Port = Field(default=7444, description="Plain-HTTP port on 127.0.0.1: /readyz (some API server "
                               "is up) and /stats (each API server's state).")
    check_interval_ms: int = Field(default=1000, ge=100, le=60000, description="Milliseconds between health checks "
                                   "of each API server (GET /readyz).")
    fall: int = Field(default=2, ge=1, le=10, description="Failed checks in a row that take an API server out.")
    rise: int = Field(default=2, ge=1, le=10, description="Passed checks in a row that put it back.")
    idle_timeout_seconds: int = Field(default=600, ge=10, le=MAX_TIMEOUT_SECONDS,
                                      description="Idle time after which a connection is closed "
                                      "(watches send events or bookmarks well within it).")


class ApiLoadBalancerModule(Module):
    key = "api_load_balancer"
    position = 70
    title = "node-local load balancer to the API servers"
    options = ApiLoadBalancerOptions
    roles = frozenset({"node"})

    def applies(self, host: HostFacts) -> bool:
        """Control-plane hosts use their own API server (see modules/kubeconfigs.py)."""
        return "node" in host.roles and "control-plane" not in host.roles

    def contribute(self, ctx: HostContext, options: ApiLoadBalancerOptions) -> Contribution:
        if ctx.cluster.local_api_port is None:  # turned off, or the endpoint is an external load balancer
            return Contribution()
        client = certificate(CERTIFICATE)
        config = ctx.shared("api-lb-config", lambda: File(
            path=CONFIG_PATH, mode=0o644, content=haproxy_config(ctx, options)))
        service = Service(
            name=SERVICE,
            component=self.key,
            description="kubesmith: node-local load balancer to the API servers (HAProxy)",
            binary=options.binary,
            argv=("-db", "-f", CONFIG_PATH),
            user=SERVICE,
            group=SERVICE,
            wanted_by="node-online.target",
            after=("network-online.target",),
            readiness=Probe(kind="http", host="127.0.0.1", port=options.monitor_port, path="/readyz",
                            run_on=ctx.host.name),
            needs_files=(CONFIG_PATH, client.cert_path, client.key_path),
            watch_files=(client.cert_path, client.key_path),
            ports=(options.port, options.monitor_port),
            unit_settings=(("DynamicUser", "yes"),
                           ("LoadCredential", f"{CERTIFICATE}.crt:{client.cert_path}"),
                           ("LoadCredential", f"{CERTIFICATE}.key:{client.key_path}")),
        )
        return Contribution(services=[service], files=[config], certificates=[CERTIFICATE])


def enabled_on(ctx: HostContext) -> bool:
    """Whether this host's components reach the API through the local load balancer."""
    return ctx.cluster.local_api_port is not None and ApiLoadBalancerModule().applies(ctx.host)


def local_address(ctx: HostContext) -> tuple[str, int]:
    assert ctx.cluster.local_api_port is not None, "the node-local load balancer does not run"
    return "127.0.0.1", ctx.cluster.local_api_port


def haproxy_config(ctx: HostContext, options: ApiLoadBalancerOptions) -> str:
    """HAProxy's whole configuration: the same on every host (it names only the API servers)."""
    api_port = ctx.cluster.api_port
    ca_file = layout.pki_path(authority("kubernetes-ca").cert_file)
    timeout = f"{options.idle_timeout_seconds}s"
    servers = [f"    server {host.name} {url_host(host.address)}:{api_port}" for host in ctx.cluster.control_plane]
    return "\n".join([
        f"# {SERVICE}: generated by kubesmith; every API server of cluster {ctx.cluster.name}",
        "global",
        "    log stderr format short local0 notice",
        "    maxconn 8192",
        # the client certificate and its key are two files (api-lb-client.crt, api-lb-client.key)
        "    ssl-load-extra-files key",
        "    ssl-load-extra-del-ext",
        "    hard-stop-after 30s",
        "",
        "defaults",
        "    mode tcp",
        "    log global",
        "    option dontlognull",
        "    timeout connect 3s",
        f"    timeout client {timeout}",
        f"    timeout server {timeout}",
        f"    timeout check {max(options.check_interval_ms, 1000)}ms",
        "",
        "frontend kube-api",
        f"    bind 127.0.0.1:{options.port}",
        f"    default_backend {BACKEND}",
        "",
        f"backend {BACKEND}",
        "    balance leastconn",
        "    option httpchk",
        "    http-check send meth GET uri /readyz ver HTTP/1.1 hdr Host localhost",
        "    http-check expect status 200",
        f"    default-server check check-ssl verify required ca-file {ca_file} "
        f"crt {CREDENTIALS}/{CERTIFICATE}.crt inter {options.check_interval_ms}ms fall {options.fall} "
        f"rise {options.rise} on-marked-down shutdown-sessions",
        *servers,
        "",
        "frontend monitor",
        "    mode http",
        f"    bind 127.0.0.1:{options.monitor_port}",
        "    monitor-uri /readyz",
        f"    monitor fail if {{ nbsrv({BACKEND}) lt 1 }}",
        "    stats enable",
        "    stats uri /stats",
        "    stats show-legends",
        "",
    ])


@dataclass(frozen=True, slots=True)
class BackendState:
    """One API server as the load balancer sees it."""

    server: str  # the host's name
    status: str  # UP, DOWN, "UP 1/2" (going down), MAINT, ...
    check: str  # the last health check's outcome, as HAProxy words it

    def __str__(self) -> str:
        return f"{self.server} {self.status}" + (f" ({self.check})" if self.check else "")


def backend_states(stats_csv: str) -> tuple[BackendState, ...]:
    """The API servers' rows of HAProxy's CSV stats (header line starts with `# `)."""
    rows = csv.DictReader(io.StringIO(stats_csv.removeprefix("# ")))
    return tuple(BackendState(row["svname"], row["status"], " ".join(filter(None, (row.get("check_status"),
                                                                                     row.get("check_desc")))))
                 for row in rows if row.get("pxname") == BACKEND and row.get("svname") not in ("BACKEND", None))


MODULE = ApiLoadBalancerModule()
