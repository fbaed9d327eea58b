"""CoreDNS: the cluster's DNS, the first add-on, in the layout every tool expects (kubeadm's, k3s's).

Deployment `coredns`, Service `kube-dns` at the spec's DNS service address (the kubelets' clusterDNS),
ConfigMap `coredns` with the Corefile, and the ServiceAccount and ClusterRole the `kubernetes` plugin
needs (list/watch EndpointSlices, Services, Namespaces), all in `kube-system` and kept by the add-on
step (`modules/addons.py`) with mode `Reconcile`: kubesmith's state wins.

No registry is reachable: the image is built on the machine running kubesmith from the static
`coredns` binary the operator supplies (`kubesmith.images.coredns_archive`, with the file capability
NET_BIND_SERVICE, as the upstream image has it) and imported on every node like the pause image.
The pod runs as a non-root user on a read-only root filesystem, with every capability dropped but
NET_BIND_SERVICE. The Corefile's hash is on the pod template, so an option change rolls the pods
(the add-on step waits for the new ones to be ready) rather than waiting for `reload` to notice.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import re
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, Field

from kubesmith.durations import go_duration_ns
from kubesmith.images import COREDNS_IMAGE, coredns_binary_problem
from kubesmith.modules.base import Module, OptionProblem
from kubesmith.modules.container_runtime import IMAGES_DIR
from kubesmith.vocabulary.facts import Contribution, HostContext
from kubesmith.vocabulary.model import File, Source
from kubesmith.vocabulary.types import (MAX_DIRECTIVES, MAX_SERVERS, MAX_ZONES, AbsolutePath, ImageReference, StrictModel,
                                  at_most, canonical_ip, resolver_unusable)

NAMESPACE = "kube-system"
ADDON = "coredns"
MODE_LABEL = "addonmanager.kubernetes.io/mode"
APP_LABELS = {"k8s-app": "kube-dns"}
IMAGE_FILE = "kubesmith-coredns.tar"  # on every node that runs kubesmith's DNS (status asks there)
IMAGE_LABEL = "images.kubesmith.io/coredns"  # on the nodes kubesmith imported its CoreDNS image to
# On SIGTERM CoreDNS closes /ready at once and keeps answering lookups this long: time for a deleted
# pod (a drain, a roll-out: it has a deletion time, so its endpoint goes at once) to leave every node's
# kube-proxy first. A reboot (graceful node shutdown) is another matter: the kubelet stops probing the
# pods it kills and never reports them unready, so their endpoints stay until they exit (kubernetes
# issue 116965); no lame duck helps there (README, "Known limitations"). The kubelet's
# shutdownGracePeriodCriticalPods must be longer than the lame duck.
LAME_DUCK_SECONDS = 10
RUN_AS = 65532  # the upstream image's non-root user (distroless "nonroot")
# The plugins compiled into CoreDNS 1.13.1, the binary kubesmith's image is built from (`coredns -plugins`;
# the list is fixed at build time by plugin.cfg). A directive outside it stops CoreDNS at start.
PLUGINS = frozenset((
    "acl any auto autopath azure bind bufsize cache cancel chaos clouddns debug dns64 dnssec dnstap erratic "
    "errors etcd file forward geoip grpc header health hosts k8s_external kubernetes loadbalance local log loop "
    "metadata minimal multisocket nomad nsid ocp_dnsnameresolver on pprof prometheus quic ready reload rewrite "
    "root route53 secondary sign template timeouts tls trace transfer tsig view whoami").split())

# A zone name as CoreDNS takes it in a server block's key: labels of letters, digits, '-' and '_' (Active
# Directory's _msdcs, SRV-style names), at most 63 bytes each and 253 in all, an optional final dot; DNS is
# case-insensitive, so kubesmith writes it lower-case without the dot. The root is '.'.
_ZONE_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")


def zone_name(text: str) -> str:
    """`text` as the zone CoreDNS serves (lower-case, no final dot; the root '.'); ValueError when it is none.
    The same rule for stubDomains keys and extraServerBlocks zones; _split_zone normalises them alike, so
    the cluster-domain and reverse-zone checks see `Cluster.Local.` as cluster.local."""
    zone = text.lower().removesuffix(".") if text != "." else "."
    if zone == ".":
        return zone
    labels = zone.split(".")
    if not zone.isascii() or len(zone) > 253 or not all(_ZONE_LABEL.fullmatch(label) for label in labels):
        raise ValueError(f"{text[:80]!r} must be a DNS zone: labels of letters, digits, '-' and '_' (at most 63 "
                         "each, 253 in all) joined by '.', a final '.' optional")
    return zone


def _checked_zone(text: str) -> str:
    zone_name(text)
    return text  # as written, so errors point at the key in the file; rendered through zone_name


StubZone = Annotated[str, AfterValidator(_checked_zone)]


# CoreDNS's forward plugin takes at most 15 resolvers a zone ("more than 15 TOs configured") and stops otherwise
MAX_UPSTREAMS = 15


def _too_many(count: int) -> str:
    return (f"{count} resolvers: CoreDNS's forward plugin takes at most {MAX_UPSTREAMS} and CoreDNS would not start; "
            "name fewer")


# counted before each is checked (CoreDNS itself takes MAX_UPSTREAMS resolvers: check() says so)
Resolvers = Annotated[list[str], at_most(MAX_SERVERS, "resolvers", f"CoreDNS forwards to at most {MAX_UPSTREAMS}")]
Directives = Annotated[list[str], at_most(MAX_DIRECTIVES, "directives", "a server block needs a few lines")]
ZONES_WHY = "a cluster forwards a few zones"


class CoreDnsOptions(StrictModel):
    enabled: bool = Field(default=True, description="Run CoreDNS as the cluster DNS (Service kube-dns at "
                          "spec.network.dnsServiceIp); off removes it at the next apply.")
    replicas: int | None = Field(default=None, ge=1, le=100, description="CoreDNS pods, spread over the nodes; "
                                 "default: 2, or 1 when the cluster has one node (a second pod there would only "
                                 "hold up drains: its disruption budget allows one pod down).",
                                 json_schema_extra={"x-derived-from": "the number of node hosts"})
    upstream: Resolvers = Field(default=[], description="Resolvers for names outside the cluster (ADDRESS or "
                                "ADDRESS:PORT); default: each node's own /etc/resolv.conf.")
    stub_domains: Annotated[dict[StubZone, Resolvers], at_most(MAX_ZONES, "stub domains", ZONES_WHY)] = Field(
        default={}, description="Domains answered by other resolvers: domain -> resolvers (ADDRESS or ADDRESS:PORT).")
    cache_ttl: int = Field(default=30, ge=0, le=86400, description="Longest time (seconds) an answer is cached; "
                           "0 turns the cache off.")
    extra_server_blocks: Annotated[dict[str, Directives], at_most(MAX_ZONES, "server blocks", ZONES_WHY)] = Field(
        default={}, description="Further Corefile server blocks: ZONE[:PORT] -> its directives, one line each "
        "(\"forward . 192.0.2.1\"); CoreDNS checks them when its pods start.")

    binary: AbsolutePath | None = Field(
        default=None, description="The static coredns binary (on the machine running kubesmith) the image is "
        "built from; default: `coredns` in --binaries DIR, else on PATH.",
        json_schema_extra={"x-derived-from": "--binaries DIR, then PATH"})
    image: ImageReference = Field(default=COREDNS_IMAGE, description="The image the pods run; kubesmith builds and imports "
                       "its own. Another image must be on the nodes already.")


class CoreDnsModule(Module):
    key = "core_dns"
    position = 140
    title = "CoreDNS cluster DNS (an add-on)"
    options = CoreDnsOptions
    roles = frozenset({"control-plane", "node"})

    def contribute(self, ctx: HostContext, options: CoreDnsOptions) -> Contribution:
        if not options.enabled:
            return Contribution()
        files: list[File] = []
        if "node" in ctx.host.roles and image_imported(ctx, options):
            files.append(File(f"{IMAGES_DIR}/{IMAGE_FILE}", 0o644,
                              source=Source("coredns-image", "coredns", (("binary", options.binary or ""),))))
        if "control-plane" in ctx.host.roles:
            from kubesmith.modules.addons import addon_file, node_labels_file  # same rung: the step's layout

            files.append(ctx.shared(("coredns-addon", id(options)), lambda: addon_file(
                ADDON, manifests(ctx, options))))
            if image_imported(ctx, options):  # this host only: apply names the other nodes it reached
                files.append(node_labels_file(ADDON, IMAGE_LABEL, [ctx.host.name] if "node" in ctx.host.roles else []))
        return Contribution(files=files)

    def check(self, spec: Any, options: CoreDnsOptions, registry: Any) -> list[OptionProblem]:
        problems = _resolver_problems(("upstream",), options.upstream)
        for domain, servers in options.stub_domains.items():
            if not servers:
                problems.append(OptionProblem(("stubDomains", domain), "name at least one resolver"))
            problems += _resolver_problems(("stubDomains", domain), servers)
        for zone, lines in options.extra_server_blocks.items():
            if not zone or any(c in zone for c in " {},") or not lines:  # one zone a block: each is checked
                problems.append(OptionProblem(("extraServerBlocks", zone), "a block is ZONE[:PORT] (one zone: no "
                                              "spaces, commas or braces) with at least one directive"))
            elif problem := _block_zone_problem(zone):
                problems.append(OptionProblem(("extraServerBlocks", zone), problem))
            else:
                problems += _directive_problems(zone, lines, own_image=options.image == COREDNS_IMAGE)
        problems += _zone_problems(spec, options)
        if options.enabled and options.binary:
            problems += _binary_problems(options.binary)
        return problems


def _resolver_problems(loc: tuple[str, ...], servers: list[str]) -> list[OptionProblem]:
    """More resolvers than CoreDNS takes is one problem; otherwise each unusable resolver is one."""
    if len(servers) > MAX_UPSTREAMS:
        return [OptionProblem(loc, _too_many(len(servers)))]
    return [OptionProblem((*loc, index), message) for index, server in enumerate(servers)
            if (message := resolver_problem(server))]


def corefile_tokens(line: str) -> list[str]:
    """The tokens CoreDNS's Corefile lexer (coredns/caddy caddyfile/lexer.go) reads from one line: words
    split at white space, a "..." word one token (\\" inside it a quote), and from a '#' outside quotes
    the rest of the line a comment. A quoted "}" is a brace to its parser too."""
    tokens: list[str] = []
    word: list[str] | None = None
    quoted = escaped = False
    for char in line:
        if quoted:
            if escaped:
                word.append(char if char == '"' else "\\" + char)  # type: ignore[union-attr]
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                tokens.append("".join(word))  # type: ignore[arg-type]
                word, quoted = None, False
            else:
                word.append(char)  # type: ignore[union-attr]
        elif char.isspace():
            if word is not None:
                tokens.append("".join(word))
                word = None
        elif char == "#":
            break
        elif word is None and char == '"':
            word, quoted = [], True
        elif word is None:
            word = [char]
        else:
            word.append(char)
    if word is not None:
        tokens.append("".join(word))
    return tokens


Directive = tuple[int, list[str]]  # (index of its line, its name and arguments: the words before any '{')


def block_directives(lines: list[str]) -> tuple[list[Directive], tuple[int, str] | None]:
    """The directives of a server block's lines as CoreDNS's parser reads them (caddyfile/parse.go: a
    line's first word outside any nested block names a plugin, '{' and '}' words nest), and the first
    brace that breaks the block: (line index, why), or None. A '}' that opens a line outside any nested
    block ends the server block itself: whatever follows would be a server block of its own."""
    directives: list[Directive] = []
    depth = 0
    for index, line in enumerate(lines):
        for position, token in enumerate(corefile_tokens(line)):
            if depth == 0 and position == 0:
                if token == "}":
                    return directives, (index, "this '}' closes the server block itself, and the words after "
                                        "it would be read as server blocks of their own (a zone's block takes "
                                        "its lookups from the cluster's): close only the blocks the lines open")
                directives.append((index, [token]))
            elif token == "{":
                depth += 1
            elif token == "}" and depth == 0:
                return directives, (index, "this '}' closes no '{' (CoreDNS: \"Unexpected '}' because no "
                                    "matching opening brace\") and would not start")
            elif token == "}":
                depth -= 1
            elif depth == 0 and directives and directives[-1][0] == index:
                directives[-1][1].append(token)
    if depth:
        return directives, (len(lines) - 1, f"{depth} '{{' left open at the end of the block: CoreDNS would not "
                            "start (or would read the next block into this one)")
    return directives, None


# Plugins CoreDNS 1.13.1 takes at most once a server block ("this plugin can only be used once per Server
# Block", checked against the binary); forward may repeat (one per FROM zone, or chained with `next`)
ONCE_PLUGINS = frozenset("cache dnssec errors hosts kubernetes loop nsid ocp_dnsnameresolver pprof prometheus "
                         "ready".split())
# Caddy replaces {$NAME} and {%NAME%} in a Corefile with the pod's environment at start
_ENVIRONMENT = re.compile(r"\{\$[^}]+\}|\{%.+?%\}")
_WILDCARD = re.compile(r"[*?\[\]]")


def _directive_problems(zone: str, lines: list[str], own_image: bool) -> list[OptionProblem]:
    """A block CoreDNS 1.13.1 would not start with, or would read as more than one block: a brace that
    breaks it, a plugin it lacks or takes once, arguments its plugins refuse. Another image may hold
    other plugins and files: a warning then, for what depends on them."""
    directives, broken = block_directives(lines)
    if broken is not None:
        index, why = broken
        return [OptionProblem(("extraServerBlocks", zone, index), f"{lines[index][:80]!r}: {why}")]
    problems, seen = [], set()
    severity = "error" if own_image else "warning"
    for index, (name, *args) in directives:
        where = ("extraServerBlocks", zone, index)
        if (found := next((t for t in (name, *args) if _ENVIRONMENT.search(t)), None)) is not None:
            problems.append(OptionProblem(where, f"{found[:80]!r}: CoreDNS replaces {{$NAME}} and {{%NAME%}} with "
                                          "its pod's environment, which the cluster file does not set: write the "
                                          "value itself"))
        elif name == "import":
            if (problem := _import_problem(args, own_image)) is not None:
                problems.append(OptionProblem(where, problem[0], problem[1]))
        elif name not in PLUGINS:
            problems.append(OptionProblem(where, f"{name[:80]!r} is not a plugin of CoreDNS 1.13.1 (`coredns "
                                          "-plugins` lists them: forward, cache, rewrite, template, hosts, file, "
                                          "log, ...): CoreDNS would not start", severity))
        elif name in ONCE_PLUGINS and name in seen:
            problems.append(OptionProblem(where, f"{name} is in this block twice: CoreDNS 1.13.1 takes it once a "
                                          "server block and would not start; merge the two", severity))
        elif name == "forward" and (problem := next(filter(None, map(address_spelling_problem,
                                                                    _forward_targets(args))), None)):
            problems.append(OptionProblem(where, problem))
        elif (problem := _argument_problem(name, args)) is not None:
            problems.append(OptionProblem(where, f"{problem}: CoreDNS would not start", severity))
        seen.add(name)
    return problems


def _import_problem(args: list[str], own_image: bool) -> tuple[str, str] | None:
    """`import FILE|GLOB` (a Corefile directive, not a plugin) splices in a file's lines. A glob may match
    nothing (CoreDNS warns and goes on); a single file must exist, and the pod mounts only its Corefile
    in /etc/coredns, where a relative name points, while kubesmith's image holds only the binary."""
    if len(args) != 1 or not args[0]:
        return "import takes one file or glob pattern: CoreDNS would not start", "error"
    if len(re.findall(r"[*?]", args[0])) > 1 or ("[" in args[0] and "]" in args[0]):
        return "CoreDNS takes one wildcard (*) in an import pattern and would not start", "error"
    if _WILDCARD.search(args[0]):
        return None
    relative = not args[0].startswith("/")
    return (f"{args[0][:80]!r} is no file in the CoreDNS pod (it mounts only its Corefile in /etc/coredns"
            f"{'' if relative else ', and kubesmith builds its image from the binary alone'}): CoreDNS would stop "
            "with \"File to import not found\"; import a glob (/etc/coredns/custom/*.server) if it may match "
            "nothing", "error" if own_image or relative else "warning")


def _argument_problem(plugin: str, args: list[str]) -> str | None:
    """Why CoreDNS 1.13.1's plugin refuses these arguments, checked against its binary: reload's interval
    under 2s or jitter under 1s (plugin/reload/setup.go; 1.13.1 refuses a jitter of 0 too), cache's TTL,
    when the first argument is a number, not above 0 (plugin/cache/setup.go)."""
    if plugin == "reload":
        if len(args) > 2:
            return "reload takes at most an interval and a jitter"
        for text, least, what in zip(args, (2, 1), ("interval", "jitter")):
            try:
                value = go_duration_ns(text)
            except ValueError as exc:
                return f"reload's {what} {text[:40]!r} is no Go duration ({exc})"
            if value < least * 10**9:
                return (f"reload's {what} {text!r} is under {least}s (CoreDNS: \"{what} value must be greater or "
                        f"equal to {least}s\")")
    if plugin == "cache" and args and re.fullmatch(r"[+-]?[0-9]+", args[0]) and int(args[0]) <= 0:
        return f"cache's TTL {args[0]!r} is not above 0 (CoreDNS: \"cache TTL can not be zero or negative\"); " \
               "leave the cache out of the block to have none"
    return None


def forward_targets(lines: list[str]) -> list[tuple[int, str]]:
    """(line index, TO) of every `forward FROM TO...` of a server block's lines, a scheme (dns://,
    tls://) taken off: where the block sends its queries."""
    return [(index, target) for index, (name, *args) in block_directives(lines)[0] if name == "forward"
            for target in _forward_targets(args)]


def _forward_targets(args: list[str]) -> list[str]:
    """The TOs of `forward FROM TO...`, a scheme (dns://, tls://) taken off."""
    return [re.sub(r"^[a-z0-9+.-]+://", "", target, flags=re.I) for target in args[1:]]


def _block_zone_problem(key: str) -> str | None:
    """Why the zone of a server block's key is none CoreDNS serves, or None; CoreDNS also takes a CIDR
    (10.0.0.0/8: its reverse zones)."""
    zone = _split_zone(key)[0]
    if _cidr_network(zone) is not None:
        return None
    try:
        zone_name(zone)
    except ValueError as exc:
        return str(exc)
    return None


def _split_zone(key: str) -> tuple[str, int]:
    """(zone, port) of a server block's key `[dns://]ZONE[:PORT]`: the zone lower-case, fully qualified
    without its final dot ('.' for the root), the port 53 when none is given."""
    text = key.lower().removeprefix("dns://")
    port = 53
    head, sep, tail = text.rpartition(":")
    if sep and tail.isascii() and tail.isdigit():
        text, port = head, int(tail)
    return (text.rstrip(".") or "."), port


def _reverse_network(zone: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    """The addresses a reverse zone (`10.in-addr.arpa`, `d.f.ip6.arpa`, `in-addr.arpa`) covers, or None."""
    for suffix, bits, base, version in (("in-addr.arpa", 8, 10, 4), ("ip6.arpa", 4, 16, 6)):
        if zone != suffix and not zone.endswith("." + suffix):
            continue
        labels = zone.removesuffix(suffix).rstrip(".").split(".") if zone != suffix else []
        width = 32 if version == 4 else 128
        if len(labels) * bits > width:
            return None
        value = 0
        for label in reversed(labels):
            try:
                digit = int(label, base)
            except ValueError:
                return None
            if digit >= 2 ** bits or label != (str(digit) if base == 10 else label.lower()[:1]):
                return None
            value = (value << bits) | digit
        prefix = len(labels) * bits
        network = ipaddress.IPv4Network if version == 4 else ipaddress.IPv6Network
        return network((value << (width - prefix), prefix))
    return None


def _cidr_network(zone: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    """The addresses a CIDR key (10.32.0.0/16) covers: CoreDNS serves it as their reverse zones
    (32.10.in-addr.arpa), or None when the zone is no CIDR."""
    try:
        return ipaddress.ip_network(zone, strict=False) if "/" in zone else None
    except ValueError:
        return None


def _zone_problems(spec: Any, options: CoreDnsOptions) -> list[OptionProblem]:
    """A zone that is, holds or lies inside the cluster's domain, or a reverse zone that overlaps the pod
    or service range, takes those lookups from the `kubernetes` plugin (CoreDNS sends a query to the
    block with the longest matching zone): every Service name would be answered elsewhere. A zone (and
    port) written twice, or the root zone the built-in block serves, stops CoreDNS at start."""
    network = spec.spec.network
    domain = network.dns_domain.lower().rstrip(".")
    ranges = [ipaddress.ip_network(cidr, strict=False) for cidr in (network.cluster_cidr, network.service_cidr)]
    seen: dict[tuple[str, int], str] = {(".", 53): "the built-in block ('.:53', the cluster's zones)"}
    problems = []
    keys = [(("stubDomains", domain_), domain_) for domain_ in sorted(options.stub_domains)]
    keys += [(("extraServerBlocks", key), key) for key in options.extra_server_blocks]
    for where, key in keys:
        zone, port = _split_zone(key)
        where_text = "spec.components.coreDns." + ".".join(where)
        if (zone, port) in seen:
            problems.append(OptionProblem(where, f"zone {zone!r} (port {port}) is already served by {seen[zone, port]}"
                                          ": CoreDNS would not start"))
            continue
        seen[zone, port] = where_text
        if port != 53 or zone == ".":
            continue
        if zone == domain or zone.endswith("." + domain) or domain.endswith("." + zone):
            problems.append(OptionProblem(where, f"zone {zone!r} overlaps the cluster domain {domain!r} "
                                          "(spec.network.dnsDomain): it would take the cluster's own lookups "
                                          "from CoreDNS's kubernetes plugin"))
        elif (reverse := _reverse_network(zone) or _cidr_network(zone)) is not None and any(
                reverse.version == cidr.version and reverse.overlaps(cidr) for cidr in ranges):
            problems.append(OptionProblem(where, f"reverse zone {zone!r} overlaps the pod or service range "
                                          f"({', '.join(map(str, ranges))}): it would take the cluster's reverse "
                                          "lookups from CoreDNS's kubernetes plugin"))
    return problems


def _binary_problems(binary: str) -> list[OptionProblem]:
    """The binary is checked where the spec is validated, as render reads it: a FIFO would hang render
    and /dev/zero fill the memory. Missing is a warning: the cluster file is also read on nodes."""
    problem = coredns_binary_problem(Path(binary))
    if problem is None:
        return []
    missing = not os.path.lexists(binary)
    return [OptionProblem(("binary",), f"{problem}; render and apply need it" if missing else problem,
                          "warning" if missing else "error")]


def _host_and_port(server: str) -> tuple[str, str | None]:
    """ADDRESS, ADDRESS:PORT or [IPv6]:PORT as (ADDRESS, PORT or None)."""
    if server.startswith("["):
        host, _, rest = server[1:].partition("]")
        return host, rest.removeprefix(":") if rest else None
    if server.count(":") == 1:
        host, port = server.split(":")
        return host, port
    return server, None


def address_spelling_problem(server: str) -> str | None:
    """Why a resolver written as an address is not its one canonical spelling (issue 32): brackets without a
    port (CoreDNS's parse.HostPortOrFile finds no IP in '[2001:db8::1]' and no such file: "not an IP address
    or file", it would not start), a zone suffix, an IPv4 address written as IPv6. None for the rest, a file
    or a canonical address."""
    host, port = _host_and_port(server)
    if server.startswith("[") and port is None:
        inner = server[1:].partition("]")[0]
        try:
            inner = canonical_ip(inner)
        except ValueError:
            pass
        return (f"{server!r} has brackets but no port: CoreDNS reads no address in it (\"not an IP address or "
                f"file\") and would not start; write {inner!r} (or {f'[{inner}]:53'!r})")
    if "%" not in host:
        try:
            ipaddress.ip_address(host)
        except ValueError:
            return None  # no address: a file, or text resolver_problem names
    try:
        canonical_ip(host)
    except ValueError as exc:
        return str(exc) if host == server else f"{server!r}: {exc}"
    return None


def resolver_problem(server: str) -> str | None:
    """Why `server` is not ADDRESS, ADDRESS:PORT or [IPv6]:PORT of a resolver a pod can reach, or None."""
    host, port = _host_and_port(server)
    if server.startswith("[") and port is None:
        return address_spelling_problem(server)
    try:
        address = ipaddress.ip_address(canonical_ip(host))
    except ValueError as exc:
        return f"{server!r} is not an address (ADDRESS or ADDRESS:PORT): {exc}"
    if port is not None and not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
        return f"{server!r}: {port!r} is not a port (1-65535)"
    if reason := resolver_unusable(address):
        return f"{server!r} is {reason}"
    return None


def corefile(ctx: HostContext, options: CoreDnsOptions) -> str:
    """The Corefile: the cluster's zones (its domain and the reverse zones of the pod and service
    ranges), upstream forwarding, and what the probes (health, ready) and metrics need."""
    cluster = ctx.cluster
    cache = f"    cache {options.cache_ttl}\n" if options.cache_ttl else ""
    # a Service is answered as soon as it exists: "no such name" in the cluster's zone is never cached
    cluster_cache = (f"    cache {options.cache_ttl} {{\n        disable denial {cluster.dns_domain}\n    }}\n"
                     if options.cache_ttl else "")
    upstream = " ".join(options.upstream) or "/etc/resolv.conf"
    text = (".:53 {\n"
            "    errors\n"
            f"    health {{\n        lameduck {LAME_DUCK_SECONDS}s\n    }}\n"
            "    ready\n"
            f"    kubernetes {cluster.dns_domain} {cluster.cluster_cidr} {cluster.service_cidr} {{\n"
            "        pods insecure\n"
            "        fallthrough in-addr.arpa ip6.arpa\n"
            "    }\n"
            "    prometheus :9153\n"
            f"    forward . {upstream} {{\n        max_concurrent 1000\n    }}\n"
            f"{cluster_cache}"
            "    loop\n"
            "    reload\n"
            "    loadbalance\n"
            "}\n")
    for domain, servers in sorted(options.stub_domains.items()):
        text += f"{zone_name(domain)}:53 {{\n    errors\n{cache}    forward . {' '.join(servers)}\n}}\n"
    for zone, lines in options.extra_server_blocks.items():
        text += f"{zone} {{\n" + "".join(f"    {line}\n" for line in lines) + "}\n"
    return text


def manifests(ctx: HostContext, options: CoreDnsOptions) -> list[dict[str, Any]]:
    """Every object of the add-on, in the order they are applied."""
    text = corefile(ctx, options)
    return [
        _object("v1", "ServiceAccount", "coredns"),
        _object("rbac.authorization.k8s.io/v1", "ClusterRole", "system:coredns", namespaced=False, rules=[
            {"apiGroups": [""], "resources": ["services", "namespaces"], "verbs": ["list", "watch"]},
            {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]}]),
        _object("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "system:coredns", namespaced=False,
                roleRef={"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:coredns"},
                subjects=[{"kind": "ServiceAccount", "name": "coredns", "namespace": NAMESPACE}]),
        _object("v1", "ConfigMap", "coredns", data={"Corefile": text}),
        deployment(options, default_replicas(ctx), hashlib.sha256(text.encode()).hexdigest(),
                   image_imported(ctx, options)),
        _object("policy/v1", "PodDisruptionBudget", "coredns",
                spec={"maxUnavailable": 1, "selector": {"matchLabels": APP_LABELS}}),
        service(ctx.cluster.dns_service_ip),
    ]


def image_imported(ctx: HostContext, options: CoreDnsOptions) -> bool:
    """kubesmith imports its own CoreDNS image on the spec's nodes (not on nodes that joined later)."""
    return ctx.cluster.container_runtime and options.image == COREDNS_IMAGE


def default_replicas(ctx: HostContext) -> int:
    return 2 if len(ctx.cluster.nodes) > 1 else 1


def deployment(options: CoreDnsOptions, replicas: int, corefile_hash: str, labelled_nodes: bool) -> dict[str, Any]:
    """The same for every node count beyond one: adding a node changes no object. `labelled_nodes`:
    the pods may run only where IMAGE_LABEL says kubesmith's image was imported (`imagePullPolicy:
    Never` fails anywhere else, and a pod there is not rescheduled by itself)."""
    container = {
        "name": "coredns",
        "image": options.image,
        "imagePullPolicy": "Never" if options.image == COREDNS_IMAGE else "IfNotPresent",
        "args": ["-conf", "/etc/coredns/Corefile"],
        "resources": {"requests": {"cpu": "100m", "memory": "70Mi"}, "limits": {"memory": "170Mi"}},
        "volumeMounts": [{"name": "config-volume", "mountPath": "/etc/coredns", "readOnly": True}],
        "ports": [{"name": "dns", "containerPort": 53, "protocol": "UDP"},
                  {"name": "dns-tcp", "containerPort": 53, "protocol": "TCP"},
                  {"name": "metrics", "containerPort": 9153, "protocol": "TCP"}],
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]}},
        "livenessProbe": {"httpGet": {"path": "/health", "port": 8080, "scheme": "HTTP"}, "initialDelaySeconds": 60,
                          "timeoutSeconds": 5, "successThreshold": 1, "failureThreshold": 5},
        "readinessProbe": {"httpGet": {"path": "/ready", "port": 8181, "scheme": "HTTP"}, "periodSeconds": 2},
    }
    spread = {"weight": 100, "podAffinityTerm": {"labelSelector": {"matchLabels": APP_LABELS},
                                                 "topologyKey": "kubernetes.io/hostname"}}
    pod = {
        "priorityClassName": "system-cluster-critical",
        "serviceAccountName": "coredns",
        "dnsPolicy": "Default",  # the node's resolvers: CoreDNS must not ask itself
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"},
                        {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}],
        "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [spread]},
                     **({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                         {"matchExpressions": [{"key": IMAGE_LABEL, "operator": "In", "values": ["true"]}]}]}}}
                        if labelled_nodes else {})},
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                       "whenUnsatisfiable": "ScheduleAnyway",
                                       "labelSelector": {"matchLabels": APP_LABELS}}],
        "securityContext": {"runAsNonRoot": True, "runAsUser": RUN_AS, "runAsGroup": RUN_AS,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [container],
        "volumes": [{"name": "config-volume", "configMap": {"name": "coredns",
                                                            "items": [{"key": "Corefile", "path": "Corefile"}]}}],
    }
    return _object("apps/v1", "Deployment", "coredns", spec={
        "replicas": options.replicas or replicas,
        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
        "selector": {"matchLabels": APP_LABELS},
        "template": {"metadata": {"labels": APP_LABELS,
                                  "annotations": {"kubesmith.io/corefile-sha256": corefile_hash}},
                     "spec": pod},
    })


def service(address: str) -> dict[str, Any]:
    return _object("v1", "Service", "kube-dns", labels={"kubernetes.io/name": "CoreDNS"},
                   annotations={"prometheus.io/port": "9153", "prometheus.io/scrape": "true"}, spec={
                       "selector": APP_LABELS, "clusterIP": address,
                       "ports": [{"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                                 {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
                                 {"name": "metrics", "port": 9153, "protocol": "TCP", "targetPort": 9153}]})


def _object(api_version: str, kind: str, name: str, namespaced: bool = True, labels: dict[str, str] | None = None,
            annotations: dict[str, str] | None = None, **body: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "labels": {**APP_LABELS, **(labels or {}), MODE_LABEL: "Reconcile"}}
    if namespaced:
        metadata["namespace"] = NAMESPACE
    if annotations:
        metadata["annotations"] = annotations
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata, **body}


MODULE = CoreDnsModule()
