"""`kubesmith status`: probe what the plan promised, per host and component, and say why not.

For every service: running (from the supervisor's run.json where `kubesmith run` runs the host;
from systemd over SSH for the others; "unknown" where neither answers), ready (one probe
attempt: result, reason, latency), version (GET /version, or etcd's maintenance status, where the
credentials allow), and residual life of the serving certificate as the server presented it.
For etcd: members and leader through the JSON gateway over mTLS. For the kubesmith agent: its
last report (when it checked, what it renewed, what is due next, what failed). The report informs;
health stays what the probes say, since a certificate the agent failed to renew still works
until it expires, and then its component's probe fails.

Probes go through a `ProbeRunner` chosen per host (`RunnerFor`); the local runner is the
default. Components bound to 127.0.0.1 (`Probe.run_on`) can only be probed from their own host:
a runner that executes on that host (SSH, agent) plugs in here without other changes.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from kubesmith import layout
from kubesmith.documents import damaged, load_json, read_json_file
from kubesmith.health.probespec import ProbeSpec, format_probe, parse_probe, probe_argument
from kubesmith.health.wait import LocalProbeRunner, ProbeOperation, ProbeRunner, describe_error
from kubesmith.layout import RunPaths
from kubesmith.modules.api_load_balancer import STATS_PATH, ApiLoadBalancerModule, backend_states
from kubesmith.modules.core_dns import IMAGE_FILE as DNS_IMAGE_FILE
from kubesmith.vocabulary.model import HostPlan, Plan, Service


@dataclass(frozen=True, slots=True)
class ConfigCondition:
    """A component's ConfigOK-style condition, as the agent recorded it: which checkpointed
    configuration is assigned, active and last-known-good (sha256), and why, in words."""

    component: str
    status: str  # True: the assigned configuration runs; False: it failed its trial; Unknown
    message: str
    reason: str | None = None
    phase: str | None = None  # trial, good, rolling-back, rolled-back, failed
    assigned: str | None = None
    active: str | None = None
    last_known_good: str | None = None
    updated: str | None = None

    @staticmethod
    def of(entry: dict[str, Any]) -> ConfigCondition | None:
        names = ConfigCondition.__dataclass_fields__
        if not isinstance(entry.get("component"), str) or not isinstance(entry.get("message"), str):
            return None
        return ConfigCondition(**{name: entry.get(name) for name in names if name in entry})  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class AgentReport:
    """The kubesmith agent's last report on a host (its state file), as status shows it."""

    last_check: str | None
    last_renewal: str | None
    next_renewal: str | None
    certificates: int
    errors: tuple[str, ...]  # the agent's own last error, then "<file>: <error>" per certificate
    configs: tuple[ConfigCondition, ...] = ()  # one per component whose configuration the agent keeps

    @staticmethod
    def of(document: dict[str, Any]) -> AgentReport:
        certificates = [c for c in _list(document.get("certificates")) if isinstance(c, dict)]
        errors = [str(document["last_error"])] if document.get("last_error") else []
        errors += [f"{c.get('path')}: {c['last_error']}" for c in certificates if c.get("last_error")]
        configs = [ConfigCondition.of(e) for e in _list(document.get("configs")) if isinstance(e, dict)]
        return AgentReport(*(_text(document.get(name)) for name in ("last_check", "last_renewal", "next_renewal")),
                           len(certificates), tuple(errors), tuple(c for c in configs if c is not None))

    @staticmethod
    def parse(text: str) -> AgentReport | None:
        """From the state file's text; None when it is not a report (never written, or cut short)."""
        try:
            document = load_json(text)
        except ValueError:
            return None
        return AgentReport.of(document) if isinstance(document, dict) else None

    @staticmethod
    def unreadable(exc: OSError) -> AgentReport:
        """A report file status cannot read (a FIFO, huge, nested too deeply): said as the agent's error,
        since the report informs and decides nothing."""
        return AgentReport(None, None, None, 0, (f"{exc.filename}: {exc.strerror or exc}",))


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _text(value: object) -> str | None:
    return None if value is None else str(value)


@dataclass(frozen=True, slots=True)
class HostView:
    """How status reaches one host: where its probes run, where its credentials are, what runs."""

    runner: ProbeRunner
    pki_dir: str
    running: dict[str, bool] | None = None  # service name -> running; None: cannot tell from here
    pids: dict[str, int | None] | None = None
    agent: AgentReport | None = None
    problem: str | None = None  # why the host could not be reached at all (said once, for the host)


PID_MAX = 1 << 22  # Linux's largest pid_max
ViewFor = Callable[[HostPlan], Awaitable[HostView]]
ETCD_MEMBERS = "/v3/cluster/member/list"
ETCD_STATUS = "/v3/maintenance/status"
ETCD_PATHS = (ETCD_MEMBERS, ETCD_STATUS)


@dataclass(frozen=True, slots=True)
class ComponentStatus:
    host: str
    service: str
    running: bool | None  # None: unknown from here
    ready: bool
    reason: str
    latency_ms: float | None
    probe: str
    version: str | None = None
    certificate_days_left: float | None = None
    pid: int | None = None
    backends: tuple[str, ...] = ()  # a load balancer's view of each API server: "h1 UP", "h2 DOWN (L4CON ...)"


@dataclass(frozen=True, slots=True)
class EtcdMember:
    name: str
    id: str
    client_urls: tuple[str, ...]
    leader: bool


@dataclass(frozen=True, slots=True)
class NodeState:
    """The host's Node as the API tells the node's own credentials: Ready or why not, and its pods."""

    ready: bool
    reason: str
    pods_running: int = 0
    pods: int = 0
    dns_pods_ready: int = 0  # CoreDNS pods on this node that are Ready
    dns_pods: int = 0


@dataclass(frozen=True, slots=True)
class DnsState:
    """The cluster DNS as this node sees it: a lookup of the `kubernetes` Service through the DNS
    Service's address (kube-proxy sends it to a CoreDNS pod), and the CoreDNS pods here."""

    ready: bool
    reason: str
    latency_ms: float | None = None


@dataclass(frozen=True, slots=True)
class HostStatus:
    host: str
    components: tuple[ComponentStatus, ...]
    etcd_members: tuple[EtcdMember, ...] = ()
    etcd_leader: str | None = None
    etcd_error: str | None = None
    agent: AgentReport | None = None
    node: NodeState | None = None
    problem: str | None = None  # the host could not be reached: every answer below is "host not reached"
    dns: DnsState | None = None

    @property
    def healthy(self) -> bool:
        if self.problem is not None:
            return False
        etcd_ok = self.etcd_error is None and (self.etcd_leader is not None or not self.etcd_members)
        node_ok = self.node is None or self.node.ready
        dns_ok = self.dns is None or self.dns.ready
        return all(c.ready and c.running is not False for c in self.components) and etcd_ok and node_ok and dns_ok


@dataclass(frozen=True, slots=True)
class ClusterStatus:
    cluster: str
    hosts: tuple[HostStatus, ...]

    @property
    def healthy(self) -> bool:
        return all(host.healthy for host in self.hosts)

    def to_dict(self) -> dict[str, Any]:
        return {"cluster": self.cluster, "healthy": self.healthy,
                "hosts": [{**asdict(h), "healthy": h.healthy} for h in self.hosts]}


def credentials_dir(state_dir: Path, host: str) -> Path:
    """Where the host's probe credentials are: its run root when `run` prepared one, else its render."""
    paths = RunPaths(state_dir, host)
    return paths.pki_dir if paths.root.is_dir() else paths.rendered / layout.PKI.lstrip("/")


def runs_agent(host: HostPlan) -> bool:
    return any(service.component == "agent" for service in host.services)


def local_agent_report(state_dir: Path, host: HostPlan) -> AgentReport | None:
    """The report of the agent that `kubesmith run` runs for the host, in its run root."""
    if not runs_agent(host):
        return None
    try:
        document = read_json_file(RunPaths(state_dir, host.name).root / layout.AGENT_STATE_FILE.lstrip("/"),
                                  "the agent's report", remedy="the agent writes it anew on its next pass")
    except FileNotFoundError:
        return None
    except OSError as exc:
        return AgentReport.unreadable(exc)
    return AgentReport.of(document) if isinstance(document, dict) else None


def supervisor_services(state_dir: Path, host: str) -> dict[str, dict[str, Any]] | None:
    """Each service's record (pid, ready, done) from a live `kubesmith run` for this host; None when no
    supervisor runs it. A record that is not one `run` wrote (a FIFO, huge, damaged) is an OSError naming it."""
    path = RunPaths(state_dir, host).state_file
    expected, remedy = "the record of a `kubesmith run`", "remove it when no `kubesmith run` runs the host"
    try:
        state = read_json_file(path, expected, remedy=remedy)
    except FileNotFoundError:
        return None
    services = state.get("services", {}) if isinstance(state, dict) else None
    if not isinstance(services, dict) or not all(isinstance(entry, dict) for entry in services.values()):
        raise damaged(path, expected, ValueError("its services are not an object of records"), remedy)
    if not pid_alive(state.get("supervisor")):
        return None
    return dict(services)


def ran_here(state_dir: Path, host: str) -> bool:
    """Whether `kubesmith run` ran this host from this state directory, running now or not: such a
    host is probed from here (a stopped run is down, not a host to reach over SSH)."""
    return RunPaths(state_dir, host).state_file.exists()


def pid_alive(pid: object) -> bool:
    """Whether `pid` names a live process; what is no process id (a string, -1, 2**80 from a damaged
    record) names none."""
    if not isinstance(pid, int) or isinstance(pid, bool) or not 0 < pid <= PID_MAX:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def node_api(host: HostPlan, pki_dir: str) -> tuple[ProbeSpec, str, str] | None:
    """How the node asks the API about itself: the kubelet's API gate (its client certificate), and the
    paths of its Node and of the pods bound to it (the Node authorizer lets a node read both)."""
    kubelet = next((s for s in host.services if s.component == "kubelet" and s.gates), None)
    if kubelet is None:
        return None
    spec = parse_probe(probe_argument(kubelet.gates[0].any_of[0], host)).resolved(pki_dir)
    return spec, f"/api/v1/nodes/{host.name}", f"/api/v1/pods?fieldSelector=spec.nodeName%3D{host.name}"


def dns_probe(host: HostPlan) -> ProbeSpec | None:
    """A lookup of `kubernetes.default.svc.<domain>` at the kubelet's cluster DNS address, on a node
    that got kubesmith's CoreDNS image (the cluster runs kubesmith's DNS add-on)."""
    if not any(f.path.endswith(f"/{DNS_IMAGE_FILE}") for f in host.files):
        return None
    config = next((f.data for f in host.files if f.path == layout.config_path("kubelet.yaml")), None)
    if not isinstance(config, dict) or not config.get("clusterDNS"):
        return None
    return ProbeSpec("dns", str(config["clusterDNS"][0]), 53, f"/kubernetes.default.svc.{config['clusterDomain']}")


def status_operations(host: HostPlan, pki_dir: str) -> list[ProbeOperation]:
    """Everything `host_status` may ask of the host's components: measured in one batch remotely."""
    operations: list[ProbeOperation] = []
    if dns := dns_probe(host):
        operations.append(ProbeOperation(format_probe(dns), "check"))
    if api := node_api(host, pki_dir):
        operations += [ProbeOperation(format_probe(api[0]), "request", "GET", path) for path in api[1:]]
    for service in host.services:
        if service.readiness is None:
            continue
        spec = parse_probe(probe_argument(service.readiness, host)).resolved(pki_dir)
        probe = format_probe(spec)
        operations.append(ProbeOperation(probe, "check"))
        if spec.scheme == "etcd":
            operations += [ProbeOperation(probe, "request", "POST", path, {}) for path in ETCD_PATHS]
        elif service.component == ApiLoadBalancerModule.key:
            operations.append(ProbeOperation(probe, "request", "GET", STATS_PATH))
        elif spec.scheme in ("https", "http"):
            operations.append(ProbeOperation(probe, "request", "GET", "/version"))
        if spec.scheme in ("https", "etcd"):
            operations.append(ProbeOperation(probe, "expiry"))
    return operations


def local_view(state_dir: Path, host: HostPlan) -> HostView:
    """Probes from this machine with the rendered credentials; running from a live `kubesmith run`."""
    services = supervisor_services(state_dir, host.name)
    pids = {name: entry.get("pid") for name, entry in services.items()} if services is not None else None
    running = {name: pid_alive(entry.get("pid")) or bool(entry.get("done")) for name, entry in services.items()} \
        if services is not None else None  # a oneshot that finished its work counts as up
    return HostView(LocalProbeRunner(), str(credentials_dir(state_dir, host.name)), running, pids,
                    local_agent_report(state_dir, host))


async def component_status(service: Service, host: HostPlan, view: HostView, timeout: float) -> ComponentStatus:
    pid = view.pids.get(service.name) if view.pids else None
    running = view.running.get(service.name) if view.running is not None else None
    if service.readiness is None:
        reason = ("done" if running else "not done") if service.oneshot else "no readiness probe"
        return ComponentStatus(host.name, service.name, running, bool(running), reason, None, "", pid=pid)
    runner = view.runner
    spec = parse_probe(probe_argument(service.readiness, host)).resolved(view.pki_dir)
    result = await runner.check(spec, timeout)
    if service.component == ApiLoadBalancerModule.key:
        return ComponentStatus(host.name, service.name, running, result.ok, result.reason,
                               round(result.latency * 1000, 1), spec.label, pid=pid,
                               backends=await balanced_servers(runner, spec, timeout))
    version = await read_version(runner, spec, timeout) if result.ok else None
    expiry = await served_expiry(runner, spec, timeout) if result.ok else None
    days = (expiry - time.time()) / 86400 if expiry else None
    return ComponentStatus(host.name, service.name, running, result.ok, result.reason,
                           round(result.latency * 1000, 1), spec.label, version,
                           round(days, 1) if days is not None else None, pid)


async def served_expiry(runner: ProbeRunner, spec: ProbeSpec, timeout: float) -> float | None:
    try:
        return await runner.certificate_expiry(spec, timeout)
    except Exception:  # the readiness answer already says whether the endpoint works
        return None


async def balanced_servers(runner: ProbeRunner, spec: ProbeSpec, timeout: float) -> tuple[str, ...]:
    """Each API server's state as the load balancer sees it (its stats page, on its monitor port); the
    readiness answer says whether the load balancer runs at all, so a failure here is left empty."""
    try:
        answer = await runner.request(spec, "GET", STATS_PATH, None, timeout)
    except Exception:
        return ()
    return tuple(str(state) for state in backend_states(answer.body)) if answer.status == 200 else ()


async def read_version(runner: ProbeRunner, spec: ProbeSpec, timeout: float) -> str | None:
    """The component's version where its endpoint tells it to these credentials."""
    try:
        if spec.scheme == "etcd":
            answer = await runner.request(spec, "POST", ETCD_STATUS, {}, timeout)
            return answer.json().get("version") if answer.status == 200 else None
        if spec.scheme in ("https", "http"):
            answer = await runner.request(spec, "GET", "/version", None, timeout)
            return answer.json().get("gitVersion") if answer.status == 200 else None
    except Exception:  # a version is a nicety: never let it mask the readiness answer
        return None
    return None


async def etcd_state(runner: ProbeRunner, spec: ProbeSpec, timeout: float) -> tuple[tuple[EtcdMember, ...], str | None]:
    """Members and the leader's name, via the JSON gateway (ids are uint64 strings there)."""
    members_answer = await runner.request(spec, "POST", ETCD_MEMBERS, {}, timeout)
    status_answer = await runner.request(spec, "POST", ETCD_STATUS, {}, timeout)
    if members_answer.status != 200 or status_answer.status != 200:
        raise RuntimeError(f"etcd gateway answered HTTP {members_answer.status}/{status_answer.status}")
    leader_id = str(status_answer.json().get("leader", ""))
    members = tuple(EtcdMember(m.get("name", ""), str(m.get("ID", "")), tuple(m.get("clientURLs", ())),
                               str(m.get("ID", "")) == leader_id)
                    for m in members_answer.json().get("members", ()))
    leader = next((m.name for m in members if m.leader), None)
    return members, leader


async def node_state(runner: ProbeRunner, host: HostPlan, pki_dir: str, timeout: float) -> NodeState | None:
    api = node_api(host, pki_dir)
    if api is None:
        return None
    spec, node_path, pods_path = api
    try:
        node, pods = await asyncio.gather(runner.request(spec, "GET", node_path, None, timeout),
                                          runner.request(spec, "GET", pods_path, None, timeout))
    except Exception as exc:
        return NodeState(False, f"the API did not answer: {describe_error(exc)}")
    if node.status != 200:
        return NodeState(False, "not registered" if node.status == 404 else f"the API answered HTTP {node.status}")
    condition = next((c for c in node.json().get("status", {}).get("conditions", []) if c.get("type") == "Ready"), {})
    items = pods.json().get("items", []) if pods.status == 200 else []
    running = sum(1 for pod in items if pod.get("status", {}).get("phase") == "Running")
    dns = [pod for pod in items if pod.get("metadata", {}).get("namespace") == "kube-system"
           and pod.get("metadata", {}).get("labels", {}).get("k8s-app") == "kube-dns"]
    ready = sum(1 for pod in dns if any(c.get("type") == "Ready" and c.get("status") == "True"
                                        for c in pod.get("status", {}).get("conditions", [])))
    return NodeState(condition.get("status") == "True", condition.get("message") or "no Ready condition yet",
                     running, len(items), ready, len(dns))


async def dns_state(runner: ProbeRunner, host: HostPlan, timeout: float) -> DnsState | None:
    spec = dns_probe(host)
    if spec is None:
        return None
    result = await runner.check(spec, timeout)
    return DnsState(result.ok, result.reason, round(result.latency * 1000, 1) if result.ok else None)


async def host_status(host: HostPlan, view: HostView, timeout: float) -> HostStatus:
    status = await _host_status(host, view, timeout)
    return replace(status, problem=view.problem) if view.problem is not None else status


async def _host_status(host: HostPlan, view: HostView, timeout: float) -> HostStatus:
    components = await asyncio.gather(*(component_status(s, host, view, timeout) for s in host.services))
    node = await node_state(view.runner, host, view.pki_dir, timeout)
    return replace(await _with_etcd(host, view, timeout, tuple(components), node),
                   dns=await dns_state(view.runner, host, timeout))


async def _with_etcd(host: HostPlan, view: HostView, timeout: float, components: tuple[ComponentStatus, ...],
                     node: NodeState | None) -> HostStatus:
    etcd = next((s for s in host.services if s.component == "etcd" and s.readiness), None)
    if etcd is None or etcd.readiness is None:
        return HostStatus(host.name, tuple(components), agent=view.agent, node=node)
    spec = parse_probe(probe_argument(etcd.readiness, host)).resolved(view.pki_dir)
    try:
        members, leader = await etcd_state(view.runner, spec, timeout)
    except Exception as exc:
        return HostStatus(host.name, tuple(components), etcd_error=describe_error(exc), agent=view.agent, node=node)
    return HostStatus(host.name, tuple(components), members, leader, None if leader else "no leader", view.agent,
                      node)


async def cluster_status(plan: Plan, view_for: ViewFor, hosts: list[str] | None = None,
                         timeout: float = 3.0) -> ClusterStatus:
    selected = [h for h in plan.hosts if not hosts or h.name in hosts]

    async def one(host: HostPlan) -> HostStatus:
        return await host_status(host, await view_for(host), timeout)

    return ClusterStatus(plan.cluster, tuple(await asyncio.gather(*(one(h) for h in selected))))


def status_lines(status: ClusterStatus) -> list[str]:
    """The text report: one line per component, then etcd's view, then the verdict."""
    lines: list[str] = []
    releases = host_releases(status)
    for host in status.hosts:
        verdict = 'healthy' if host.healthy else 'UNHEALTHY'
        release = f", Kubernetes {releases[host.host]}" if releases.get(host.host) else ""
        lines.append(f"host {host.host}: " + (f"UNREACHABLE ({host.problem})" if host.problem else verdict + release))
        for c in host.components:
            running = {True: "running", False: "not running", None: "running?"}[c.running]
            ready = "ready" if c.ready else "NOT READY"
            extra = [f"{c.latency_ms:g} ms" if c.latency_ms is not None else "",
                     c.version or "", f"cert {c.certificate_days_left:g} days" if c.certificate_days_left is not None else ""]
            detail = ", ".join(x for x in extra if x)
            reason = "" if c.ready else f" ({c.reason})"
            lines.append(f"  {c.service:<24} {running:<12} {ready}{reason}" + (f"  [{detail}]" if detail else ""))
            if c.backends:
                lines.append(f"    API servers: {', '.join(c.backends)}")
        if host.node is not None:
            pods = f"{host.node.pods_running}/{host.node.pods} pods running"
            lines.append(f"  node: Ready, {pods}" if host.node.ready
                         else f"  node: NOT READY ({host.node.reason}), {pods}")
        if host.dns is not None:
            here = f"; CoreDNS pods here: {host.node.dns_pods_ready}/{host.node.dns_pods} Ready" if host.node else ""
            lines.append(f"  dns: ready ({host.dns.reason}, {host.dns.latency_ms:g} ms{here})" if host.dns.ready
                         else f"  dns: NOT READY ({host.dns.reason}{here})")
        if host.etcd_members or host.etcd_error:
            names = ", ".join(m.name + ("*" if m.leader else "") for m in host.etcd_members)
            lines.append(f"  etcd members: {names or '-'}; leader: {host.etcd_leader or '-'}"
                         + (f" ({host.etcd_error})" if host.etcd_error else ""))
        if host.agent is not None:
            lines += agent_lines(host.agent)
    lines += dns_summary(status)
    progress = upgrade_in_progress(releases)
    if progress:
        lines.append(progress)
    lines.append("cluster healthy" if status.healthy else "cluster UNHEALTHY")
    return lines


def dns_summary(status: ClusterStatus) -> list[str]:
    """One line for the cluster DNS: its pods Ready across the nodes, and where lookups answered."""
    asked = [host for host in status.hosts if host.dns is not None]
    if not asked:
        return []
    ready = sum(h.node.dns_pods_ready for h in status.hosts if h.node)
    pods = sum(h.node.dns_pods for h in status.hosts if h.node)
    answered = [h.host for h in asked if h.dns is not None and h.dns.ready]
    verdict = "ready" if ready and len(answered) == len(asked) else "NOT READY"
    return [f"cluster DNS: {verdict}: {ready}/{pods} CoreDNS pods Ready; lookups answered on "
            f"{len(answered)}/{len(asked)} nodes"]


def host_releases(status: ClusterStatus) -> dict[str, str]:
    """Each host's Kubernetes release, as its components' /version tells (etcd is versioned on its own);
    hosts whose components disagree show each release ("1.35.6/1.36.2": in the middle of a change)."""
    found: dict[str, str] = {}
    for host in status.hosts:
        releases = sorted({c.version.removeprefix("v") for c in host.components
                           if c.version and c.service != "etcd" and c.version.startswith("v1.")})
        if releases:
            found[host.host] = "/".join(releases)
    return found


def upgrade_in_progress(releases: dict[str, str]) -> str | None:
    """A line saying the hosts run different releases (an upgrade under way or halted), or None."""
    by_release: dict[str, list[str]] = {}
    for host, release in releases.items():
        by_release.setdefault(release, []).append(host)
    if len(by_release) < 2:
        return None
    parts = "; ".join(f"{', '.join(hosts)} at {release}" for release, hosts in sorted(by_release.items()))
    return f"release change in progress (or halted): {parts}"


def agent_lines(report: AgentReport, shown_errors: int = 5) -> list[str]:
    """One summary line, then the first errors (the JSON output has them all)."""
    lines = [f"  agent: checked {report.last_check or 'never'}; {report.certificates} certificates; "
             f"last renewal {report.last_renewal or 'none'}; next due {report.next_renewal or 'none'}"]
    lines += [f"  agent error: {error}" for error in report.errors[:shown_errors]]
    for config in report.configs:  # as the kubelet's ConfigOK condition reads
        reason = f": {config.reason}" if config.reason else ""
        lines.append(f"  config {config.component}: ConfigOK={config.status}, {config.message}{reason}")
    if len(report.errors) > shown_errors:
        lines.append(f"  agent: {len(report.errors) - shown_errors} more errors (-o json lists them)")
    return lines
