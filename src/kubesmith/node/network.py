"""`kubesmith network up`: what a node's pod network needs besides the CNI plugins (see
`modules/pod_network.py`): the sysctls, the routes to the other nodes' pods last learned from the
cluster (`node/routes.py` keeps them current; at boot they are back before the API answers), and
masquerading of pod traffic that leaves the cluster. Idempotent: it runs at every start of its unit.

Sysctls are set only with `--set-sysctls` (hosts, where sysctl.d holds them anyway); without it
(`kubesmith run` on someone's machine) a wrong value is reported with the way to set it, and
nothing about the machine is changed behind its owner's back.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubesmith import fsutil

CHAIN = "KUBESMITH-POSTROUTING"
PROC_SYS = Path("/proc/sys")
Say = Callable[[str], None]


class NetworkError(Exception):
    """The node's network cannot be brought up; the message says what to do."""


@dataclass(frozen=True, slots=True, order=True)
class Route:
    to: str
    via: str


@dataclass(frozen=True, slots=True)
class Masquerade:
    source: str  # the node's pod range
    except_to: str  # the cluster's pod range: pod-to-pod traffic keeps its addresses


@dataclass(frozen=True, slots=True)
class NetworkSettings:
    masquerade: Masquerade | None
    sysctls: tuple[tuple[str, str], ...]
    modules: tuple[str, ...]
    bridge: str | None = None  # the pods' bridge (the CNI plugin makes it; `down` removes it)
    cluster_cidr: str | None = None  # kubesmith's routes are those into it via a gateway
    node: str | None = None  # this node's name (its Node object)
    pod_cidr: str | None = None  # this node's pod range, which it announces on its Node
    kubeconfig: Path | None = None  # the kubelet's: a node may change its own Node only
    nodes_kubeconfig: Path | None = None  # kube-proxy's: it may read every Node (the kubelet's may not)
    routes_file: Path | None = None  # the routes last learned from the cluster

    @staticmethod
    def load(path: Path) -> NetworkSettings:
        try:
            return NetworkSettings.from_document(json.loads(path.read_text()))
        except OSError as exc:
            raise NetworkError(f"{path}: {exc.strerror}") from None
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise NetworkError(f"{path}: not a network settings file ({exc.__class__.__name__}: {exc})") from None

    @staticmethod
    def from_document(document: dict[str, Any]) -> NetworkSettings:
        """The settings of the plan's network file (`modules/pod_network.network_settings`)."""
        masquerade = document.get("masquerade")
        return NetworkSettings(
            masquerade=Masquerade(str(masquerade["from"]), str(masquerade["except"])) if masquerade else None,
            sysctls=tuple((str(k), str(v)) for k, v in sorted(document.get("sysctls", {}).items())),
            modules=tuple(str(m) for m in document.get("modules", ())),
            bridge=str(document["bridge"]) if document.get("bridge") else None,
            cluster_cidr=str(document["clusterCidr"]) if document.get("clusterCidr") else None,
            node=str(document["node"]) if document.get("node") else None,
            pod_cidr=str(document["podCidr"]) if document.get("podCidr") else None,
            kubeconfig=_path(document, "kubeconfig"), nodes_kubeconfig=_path(document, "nodesKubeconfig"),
            routes_file=_path(document, "routesFile"))


def _path(document: dict[str, Any], key: str) -> Path | None:
    return Path(str(document[key])) if document.get(key) else None


def bring_up(settings: NetworkSettings, set_sysctls: bool, say: Say, route_patience: float = 60.0) -> None:
    sysctls(settings, set_sysctls, say)
    learned = learned_routes(settings.routes_file)
    sync_routes(learned, settings.cluster_cidr, say, route_patience)
    if learned:
        say(f"routes to {len(learned)} other node{'s' if len(learned) != 1 else ''}' pods, as last learned")
    if settings.masquerade is not None:
        masquerade(settings.masquerade)
        say(f"masquerading {settings.masquerade.source} except towards {settings.masquerade.except_to}")


def learned_routes(path: Path | None) -> tuple[Route, ...]:
    """The routes the follower saved; none before it first reached the cluster (or when unreadable:
    the follower writes them again within seconds of reaching the API)."""
    try:
        document = json.loads(path.read_bytes()) if path is not None else {}
        return tuple(Route(str(r["to"]), str(r["via"])) for r in document.get("routes", ()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return ()


def save_routes(path: Path, routes: tuple[Route, ...]) -> None:
    document = {"routes": [{"to": route.to, "via": route.via} for route in routes]}
    fsutil.atomic_write(path, (json.dumps(document, indent=2) + "\n").encode(), 0o644)


def sync_routes(wanted: tuple[Route, ...], cluster_cidr: str | None, say: Say, patience: float) -> None:
    """Exactly `wanted` among the routes via a gateway into the cluster's pod range: the others lead
    to a node that left (or changed its address). Routes outside that range are not kubesmith's."""
    for route in wanted:
        add_route(route, patience)
    for route in present_routes(cluster_cidr):
        if route not in wanted:
            _run(["ip", "route", "del", route.to, "via", route.via], check=False)  # gone already: fine
            say(f"removed the route to {route.to} via {route.via}")


def present_routes(cluster_cidr: str | None) -> list[Route]:
    """The routes via a gateway into the cluster's pod range: kubesmith's."""
    if cluster_cidr is None:
        return []
    cluster = ipaddress.ip_network(cluster_cidr)
    family = "-6" if cluster.version == 6 else "-4"
    listed = json.loads(_run(["ip", "-json", family, "route", "show"], check=False).stdout or "[]")
    return [Route(str(route["dst"]), str(route["gateway"])) for route in listed
            if route.get("gateway") and within(str(route.get("dst", "")), cluster)]


def within(destination: str, cluster: ipaddress.IPv4Network | ipaddress.IPv6Network) -> bool:
    """Whether a route's destination (or a node's announced range) lies in the cluster's pod range."""
    try:
        network = ipaddress.ip_network(destination)
    except ValueError:  # "default" and the like
        return False
    return network.version == cluster.version and network.subnet_of(cluster)  # type: ignore[arg-type]


def add_route(route: Route, patience: float) -> None:
    """`ip route replace`, asked again for a while: at boot the link to the gateway may not be up yet."""
    from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_exponential  # only to add one

    retrying = Retrying(retry=retry_if_exception_type(NetworkError), stop=stop_after_delay(patience),
                        wait=wait_exponential(multiplier=0.2, max=5), reraise=True)
    retrying(_run, ["ip", "route", "replace", route.to, "via", route.via])


def bring_down(settings: NetworkSettings, say: Say, remove_bridge: bool = False) -> None:
    """Undo `bring_up`; what is gone already is fine. Sysctls stay. The pods' bridge and their links
    only with `remove_bridge`: pods outlive their unit (containerd keeps its shims), so a stop or
    restart of kubesmith-network that took them would leave running pods with no network for good."""
    sync_routes((), settings.cluster_cidr, say, 0)
    if _iptables("-t", "nat", "-C", "POSTROUTING", "-j", CHAIN, check=False).returncode == 0:
        _iptables("-t", "nat", "-D", "POSTROUTING", "-j", CHAIN)
    if _iptables("-t", "nat", "-L", CHAIN, "-n", check=False).returncode == 0:
        _iptables("-t", "nat", "-F", CHAIN)
        _iptables("-t", "nat", "-X", CHAIN)
        say("removed the masquerading rule")
    if remove_bridge and settings.bridge and _run(["ip", "link", "show", settings.bridge], check=False).returncode == 0:
        for link in _pod_links(settings.bridge):
            _run(["ip", "link", "del", link], check=False)  # gone already with its pod: fine
        _run(["ip", "link", "del", settings.bridge])
        say(f"removed the bridge {settings.bridge}")


def _pod_links(bridge: str) -> list[str]:
    """The pods' ends of their veth pairs on the bridge. Deleted here, each pair is gone at once;
    left to the kernel, a pair outlives its pod's network namespace for as long as the kernel's
    cleanup of that namespace takes (seconds on a busy machine)."""
    listed = _run(["ip", "-json", "link", "show", "master", bridge], check=False).stdout
    return [str(link["ifname"]) for link in json.loads(listed or "[]")]


def sysctls(settings: NetworkSettings, set_sysctls: bool, say: Say) -> None:
    wrong = [(name, value) for name, value in settings.sysctls if _read(name) != value]
    if not wrong:
        return
    if not set_sysctls:
        listed, fix = sysctl_advice([(name, _read(name), value) for name, value in wrong], settings.modules)
        raise NetworkError(f"{listed}: pods need them, and kubesmith changes no setting of this machine on its "
                           f"own: {fix}")
    if any(_read(name) is None for name, _ in wrong):
        for module in settings.modules:
            _run(["modprobe", module])
    for name, value in wrong:
        try:
            (PROC_SYS / name.replace(".", "/")).write_text(value)
        except OSError as exc:
            raise NetworkError(f"cannot set {name}={value}: {exc.strerror}") from None
        say(f"set {name}={value}")


def sysctl_advice(wrong: Sequence[tuple[str, str | None, str]], modules: Sequence[str]) -> tuple[str, str]:
    """(what is wrong, how to set it) for sysctls (name, current value or None, value needed): the words
    of `network up` here and of preflight before `run` starts anything."""
    listed = ", ".join(f"{name} is {current or 'missing'}, needs {value}" for name, current, value in wrong)
    commands = "; ".join(f"sysctl -w {name}={value}" for name, _, value in wrong)
    hint = f" (load {', '.join(modules)} first: modprobe {' '.join(modules)})" \
        if modules and any(current is None for _, current, _ in wrong) else ""
    return listed, f"run `{commands}`{hint}, or put them in /etc/sysctl.d"


def masquerade(rule: Masquerade) -> None:
    """POSTROUTING jumps to kubesmith's own chain, which holds exactly the one rule (flushed first)."""
    if _iptables("-t", "nat", "-L", CHAIN, "-n", check=False).returncode != 0:
        _iptables("-t", "nat", "-N", CHAIN)
    if _iptables("-t", "nat", "-C", "POSTROUTING", "-j", CHAIN, check=False).returncode != 0:
        _iptables("-t", "nat", "-A", "POSTROUTING", "-j", CHAIN)
    _iptables("-t", "nat", "-F", CHAIN)
    _iptables("-t", "nat", "-A", CHAIN, "-s", rule.source, "!", "-d", rule.except_to, "-j", "MASQUERADE",
              "-m", "comment", "--comment", "kubesmith: pods leaving the cluster")


def _read(name: str) -> str | None:
    try:
        return (PROC_SYS / name.replace(".", "/")).read_text().strip()
    except OSError:
        return None


def _iptables(*arguments: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return _run(["iptables", "-w", "5", *arguments], check)


def _run(argv: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    except FileNotFoundError:
        raise NetworkError(f"{argv[0]} not found: the node needs iproute2 and iptables") from None
    except subprocess.TimeoutExpired:
        raise NetworkError(f"`{' '.join(argv)}` did not finish in 30s") from None
    if check and result.returncode != 0:
        raise NetworkError(f"`{' '.join(argv)}` failed: {result.stderr.strip()[-300:]}")
    return result
