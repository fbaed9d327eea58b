"""Reusable option types: each validates its own syntax so errors point at the exact option."""

from __future__ import annotations

import ipaddress
import posixpath
import re
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, PlainValidator, WithJsonSchema
from pydantic.alias_generators import to_camel

from kubesmith.vocabulary.errors import yaml_text
from kubesmith.lifetimes import SERVICE_VALIDITY_MAX_DAYS, TOKEN_MAX_DAYS
from kubesmith.urls import ca_url_problem
from kubesmith.durations import (check_go_at_least, check_go_length, check_go_period, format_duration,
                                 parse_duration)

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_NAME = re.compile(r"^(?=.{1,63}$)[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_HOST_PORT = re.compile(r"^(?P<host>\[[0-9a-fA-F:]+\]|[^:\[\]]+):(?P<port>[0-9]{1,5})$")


class StrictModel(BaseModel):
    """Every spec object: strict types ("6443" is not an int), unknown keys rejected, immutable."""

    model_config = ConfigDict(
        strict=True,
        extra="forbid",
        frozen=True,
        alias_generator=to_camel,
        populate_by_name=True,
        use_attribute_docstrings=False,
        allow_inf_nan=False,  # YAML's .nan and .inf: no option means them, and comparisons with NaN are all false
    )


def canonical_ip(value: str) -> str:
    """The canonical text of an address (`fd00:0::1` -> `fd00::1`): what reaches argv, certificates and
    configuration files, and what duplicates are found by."""
    if "%" in value:
        raise ValueError(f"{value!r} has a zone suffix (%...): write the address alone; no component takes a zone")
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        raise ValueError(f"{value!r} is not a valid IPv4 or IPv6 address") from None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        raise ValueError(f"{value!r} is an IPv4-mapped IPv6 address: write {str(address.ipv4_mapped)!r}")
    if isinstance(address, ipaddress.IPv6Address) and (embedded := _embedded_ipv4(address)):
        what, v4 = embedded
        raise ValueError(f"{value!r} is {what}, which stands for an IPv4 address no host holds as IPv6: "
                         f"write {str(v4)!r}")
    return str(address)


# IPv6 spellings of an IPv4 address that, like the IPv4-mapped form, are no address of their own: the
# IPv4-compatible form (::/96, deprecated by RFC 4291; `::` and `::1` are the unspecified and loopback
# addresses, not IPv4) and SIIT's IPv4-translated form (::ffff:0:0:0/96, RFC 2765). Stacks route neither.
IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")
IPV4_TRANSLATED = ipaddress.IPv6Network("::ffff:0:0:0/96")


def _embedded_ipv4(address: ipaddress.IPv6Address) -> tuple[str, ipaddress.IPv4Address] | None:
    v4 = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address in IPV4_COMPATIBLE and int(address) > 1:
        return "an IPv4-compatible IPv6 address (::/96, deprecated by RFC 4291)", v4
    if address in IPV4_TRANSLATED:
        return "an IPv4-translated IPv6 address (::ffff:0:0:0/96, SIIT)", v4
    return None


def _cidr(value: str) -> str:
    if "%" in value:
        raise ValueError(f"{value!r} has a zone suffix (%...): a range takes none")
    try:
        network = ipaddress.ip_network(value, strict=True)
    except ValueError as exc:
        raise ValueError(f"{value!r} is not a valid CIDR ({exc})") from None
    if isinstance(network, ipaddress.IPv6Network) and network.network_address.ipv4_mapped is not None:
        raise ValueError(f"{value!r} is an IPv4-mapped IPv6 range: write the IPv4 range")
    return str(network)


def is_dns_label(value: str) -> bool:
    """What host names (and so node names) must be: lower-case letters, digits and '-', 1-63."""
    return _DNS_LABEL.match(value) is not None


def _dns_label(value: str) -> str:
    if not is_dns_label(value):
        raise ValueError(f"{value!r} must be a DNS label: lower-case letters, digits and '-', at most 63")
    return value


def _dns_subdomain(value: str) -> str:
    if not _DNS_SUBDOMAIN.match(value):
        raise ValueError(f"{value!r} must be a DNS name: lower-case letters, digits, '-' and '.'")
    return value


def _host_port(value: str) -> str:
    """HOST:PORT in canonical form: an address as `_ip` writes it, the port without leading zeros."""
    match = _HOST_PORT.match(value)
    if not match or not 1 <= int(match["port"]) <= 65535 or not _is_host(match["host"]):
        raise ValueError(f"{value!r} must be HOST:PORT (for example 10.0.0.10:6443)")
    host = match["host"]
    if host.startswith("["):
        host = f"[{canonical_ip(host[1:-1])}]"
    elif host[0].isdigit() and re.fullmatch(r"[0-9.]+", host):
        host = canonical_ip(host)
    return f"{host}:{int(match['port'])}"


def _is_host(text: str) -> bool:
    """An IP address (IPv6 in brackets) or a DNS name."""
    try:
        address = ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        looks_numeric = bool(re.fullmatch(r"[0-9.]+", text))  # a mistyped address, not a name
        return not text.startswith("[") and not looks_numeric and bool(_DNS_SUBDOMAIN.match(text))
    return (address.version == 6) == text.startswith("[")


def label_key_problem(value: str) -> str | None:
    """Why `value` is no Kubernetes label (or taint) key, a qualified name: an optional DNS-subdomain prefix
    (at most 253) and '/', then a name of at most 63; None when it is one."""
    prefix, slash, name = value.rpartition("/")
    valid_prefix = not slash or bool(_DNS_SUBDOMAIN.match(prefix))
    if not _LABEL_NAME.match(name) or not valid_prefix:
        return (f"{value!r} is not a valid label key: [prefix/]name, name at most 63 of "
                "letters, digits, '-', '_', '.'")
    return None


def label_value_problem(value: str) -> str | None:
    """Why `value` is no Kubernetes label (or taint) value: empty, or at most 63 of letters, digits, '-', '_',
    '.' beginning and ending with a letter or digit; None when it is one."""
    if value and not _LABEL_NAME.match(value):
        return f"{value!r} is not a valid label value: at most 63 of letters, digits, '-', '_', '.'"
    return None


def _label_key(value: str) -> str:
    if problem := label_key_problem(value):
        raise ValueError(problem)
    return value


def _label_value(value: str) -> str:
    if problem := label_value_problem(value):
        raise ValueError(problem)
    return value


TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def taint_problem(key: Any, value: Any, effect: Any) -> str | None:
    """Why the API server refuses a Node with this taint (so the kubelet never registers), or None: the key
    is a qualified name, the value a label value, the effect one of TAINT_EFFECTS (case matters)."""
    if not isinstance(key, str) or (problem := label_key_problem(key)):
        return f"taint key: {problem}" if isinstance(key, str) else f"taint key {yaml_text(key)} is no string"
    if not isinstance(value, str) or (problem := label_value_problem(value)):
        return f"taint value: {problem}" if isinstance(value, str) else f"taint value {yaml_text(value)} is no string"
    if effect not in TAINT_EFFECTS:
        return (f"taint effect {yaml_text(effect)} is none of {', '.join(TAINT_EFFECTS)} (case matters): the API "
                "server refuses the Node, so the kubelet never registers")
    return None


def split_taint(text: str) -> tuple[str, str, str]:
    """(key, value, effect) of `key[=value][:Effect]`; the effect is NoSchedule when none is written."""
    key_value, colon, effect = text.partition(":")
    key, _, value = key_value.partition("=")
    return key, value, effect if colon else "NoSchedule"


def _taint(value: str) -> str:
    if problem := taint_problem(*split_taint(value)):
        raise ValueError(f"{value!r} is no taint key[=value][:Effect]: {problem}")
    return value


# The distribution reference grammar (github.com/distribution/reference): [host[:port]/]path[:tag][@digest],
# path components lower-case; the name part at most 255 characters, as docker and containerd check
_IMAGE_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
# the registry host is a DNS name or, since distribution v0.6 (containerd 1.7 and 2.x), an IPv6 address in brackets
_IMAGE_DOMAIN = (r"(?:(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*"
                 r"|\[[a-fA-F0-9:]+\])(?::[0-9]+)?")
_IMAGE_REFERENCE = re.compile(
    rf"(?P<name>(?:{_IMAGE_DOMAIN}/)?{_IMAGE_COMPONENT}(?:/{_IMAGE_COMPONENT})*)"
    r"(?::(?P<tag>[\w][\w.-]{0,127}))?(?:@(?P<digest>sha256:[0-9a-f]{64}|sha384:[0-9a-f]{96}|sha512:[0-9a-f]{128}))?",
    re.ASCII)
MAX_IMAGE_NAME = 255


def _image_reference(value: str) -> str:
    """An image reference the container runtime resolves: a bad one means no pod (no sandbox) starts."""
    match = _IMAGE_REFERENCE.fullmatch(value) if len(value) <= MAX_IMAGE_NAME + 300 else None
    if match is None:
        shown = value if len(value) <= 80 else f"{value[:40]}...({len(value)} characters)"
        raise ValueError(f"{shown!r} is not an image reference [registry[:port]/]path[:tag][@sha256:<64 hex>] "
                         "(path components lower-case letters and digits, '.', '_', '-' inside; no whitespace)")
    if len(match["name"]) > MAX_IMAGE_NAME:
        raise ValueError(f"the image name is {len(match['name'])} characters long: at most {MAX_IMAGE_NAME}")
    return value


def _https_url(value: str) -> str:
    """An https URL a client dials (kubesmith.urls says why each part is refused), whose host is an
    address (IPv6 in brackets) or a DNS name."""
    if problem := ca_url_problem(value):
        raise ValueError(problem)
    netloc = urlsplit(value).netloc
    host = netloc.rpartition(":")[0] if netloc.rpartition(":")[2].isdigit() else netloc
    if not _is_host(host.lower()):  # DNS names are case-insensitive
        raise ValueError(f"{value!r} names no usable host: an address (IPv6 in brackets) or a DNS name")
    return value


def _text(value: str) -> str:
    """A free string: not blank, and without the leading or trailing whitespace no consumer would read
    (a user name, a URL, a path, a domain)."""
    if not value.strip():
        raise ValueError(f"{value!r} is blank: write a value, or leave the option out for its default")
    if value != value.strip():
        raise ValueError(f"{value!r} begins or ends with whitespace: write {value.strip()!r}")
    return value


IFNAMSIZ = 16  # the kernel's interface names: at most 15 bytes and a NUL


def _interface_name(value: str) -> str:
    """A network interface name the kernel takes (net/core/dev.c, dev_valid_name: at most 15 bytes, not `.`
    or `..`, no '/', ':' or whitespace), kept to letters, digits, '_', '.' and '-' and not led by '-', as it
    reaches `ip link` argv (`br-pods`, `cni0`, `kube_br.1` all are)."""
    if not re.fullmatch(r"[A-Za-z0-9_.][A-Za-z0-9_.-]*", value, re.ASCII) or value in (".", ".."):
        raise ValueError(f"{value!r} is not a network interface name: letters, digits, '_', '.' and '-' (not "
                         "first), and not '.' or '..'")
    if len(value) >= IFNAMSIZ:
        raise ValueError(f"{value!r} is {len(value)} characters long: an interface name has at most "
                         f"{IFNAMSIZ - 1}")
    return value


def _semver(value: str) -> str:
    # Kubernetes' own versions (k8s.io/apimachinery/pkg/util/version) are semantic versions: no leading zeros
    if not re.fullmatch(r"v?(0|[1-9][0-9]{0,8})\.(0|[1-9][0-9]{0,8})\.(0|[1-9][0-9]{0,8})", value):
        raise ValueError(f"{value!r} must be a release version such as 1.28.7 (numbers without leading zeros, at "
                         "most 9 digits each)")
    return value.removeprefix("v")


_PATH_CHARACTERS = re.compile(r"[A-Za-z0-9._@+,:=~/-]+")


PATH_MAX = 4096  # bytes of a path the kernel opens, its final NUL included (ENAMETOOLONG beyond)
NAME_MAX = 255  # bytes of one component of a path


def _path_length(value: str) -> str:
    """A path the kernel can open: shorter than PATH_MAX, no component longer than NAME_MAX (else the
    error would be "File name too long", blaming no option)."""
    if len(value.encode(errors="surrogatepass")) >= PATH_MAX:
        raise ValueError(f"{value!r} is longer than {PATH_MAX - 1} bytes, the longest path the system opens")
    if any(len(part.encode(errors="surrogatepass")) > NAME_MAX for part in value.split("/")):
        raise ValueError(f"{value!r} has a component longer than {NAME_MAX} bytes, the longest file name the "
                         "system takes")
    return value


def _absolute_path(value: str) -> str:
    """Absolute, normalised and plain: paths end up in flags, unit settings (StateDirectory=, ReadWritePaths=,
    space-separated) and tmpfiles.d lines, where whitespace, `%` or quotes would mean something else."""
    _path_length(value)
    if not value.startswith("/"):
        raise ValueError(f"{value!r} must be an absolute path (starting with /)")
    normal = posixpath.normpath(value)
    normal = normal[1:] if normal.startswith("//") else normal
    if normal != value:
        raise ValueError(f"{value!r} is not a normalised path: it means {normal!r}; write that")
    if not _PATH_CHARACTERS.fullmatch(value):
        raise ValueError(f"{value!r}: a path here may hold letters, digits and . _ @ + , : = ~ / - only")
    return value


def port_range_bounds(value: str) -> tuple[int, int] | None:
    """(low, high) of a port range as kube-apiserver reads --service-node-port-range (k8s.io/apimachinery
    pkg/util/net, PortRange.Set): `LOW-HIGH`, `BASE+OFFSET` (BASE to BASE+OFFSET) or one `PORT`, both ends
    inclusive; None when it is none of these."""
    match = re.fullmatch(r"([0-9]{1,5})(?:([-+])([0-9]{1,5}))?", value)
    if not match:
        return None
    low = int(match[1])
    if match[2] is None:
        return low, low
    return (low, int(match[3])) if match[2] == "-" else (low, low + int(match[3]))


def _port_range(value: str) -> str:
    bounds = port_range_bounds(value)
    if bounds is None:
        raise ValueError(f"{value!r} must be a port range LOW-HIGH (or BASE+OFFSET, or one PORT), for example "
                         "30000-32767")
    low, high = bounds
    if not 1 <= low <= high <= 65535:
        raise ValueError(f"{value!r} must run from low to high within 1-65535")
    return value


_SEPARATORS = re.compile(r"[,=\"'\s]")


def _list_item(value: str) -> str:
    """One item of a list that reaches a comma-separated flag: a `,` would add an item the checks never saw
    (`[Node, "RBAC,AlwaysAllow"]`), quotes change how Go's CSV reader splits, `=` and whitespace are no
    part of any plugin, mode or cipher name."""
    found = _SEPARATORS.search(value)
    if not value or found:
        what = f"holds {found.group()!r} at position {found.start() + 1}" if found else "is empty"
        raise ValueError(f"list item {value!r} {what}: an item of this list may not be empty or hold ',', '=', "
                         "quotes or whitespace; write one name per item")
    if odd := next((c for c in value if not (c.isascii() and c.isprintable())), None):
        raise ValueError(f"list item {value!r} holds U+{ord(odd):04X} at position {value.index(odd) + 1}: the names "
                         "this list takes (plugins, modes, ciphers) are printable ASCII; an invisible or look-alike "
                         "character makes a name the binary does not know")
    return value


def _san(value: str) -> str:
    """A certificate name: an address (canonical) or a DNS name, `*.` allowed in front. An address no client
    dials (unspecified, broadcast, multicast, 0.0.0.0/8) names nothing a certificate could vouch for; loopback
    and link-local addresses are dialled (a client on the host itself, a point-to-point link) and stay."""
    if ":" in value or re.fullmatch(r"[0-9.]+", value):
        text = canonical_ip(value)
        if reason := _never_dialled(ipaddress.ip_address(text)):
            raise ValueError(f"{value!r} is {reason}, which no client dials: a certificate names addresses "
                             "its clients connect to")
        return text
    if not _DNS_SUBDOMAIN.match(value.removeprefix("*.")):
        raise ValueError(f"{value!r} must be an IP address or a DNS name (lower-case letters, digits, '-', '.')")
    return value


MAX_DURATION_DAYS = 36500  # the longest a CA may live (spec.pki.caValidityDays); timers beyond it never fire


def _duration(value: str) -> str:
    """kubesmith's own durations (`90s`, `12h`, `7d`): positive (a zero interval would spin, a zero lifetime
    expire at once) and at most MAX_DURATION_DAYS."""
    if not re.fullmatch(r"(\d+(\.\d+)?[dhms])+", value, re.ASCII):
        raise ValueError(f"{value!r} is not a duration (examples: 90s, 15m, 1h30m, 7d)")
    seconds = parse_duration(value)
    if seconds > MAX_DURATION_DAYS * 86400:
        raise ValueError(f"{value!r} is longer than {MAX_DURATION_DAYS} days "
                         f"({format_duration(MAX_DURATION_DAYS * 86400)})")
    return value


def go_at_least(minimum: str, why: str, zero_ok: bool = False) -> Any:
    """A Go duration of at least `minimum`: the "never zero" rule alone lets `1ns` through, which is as
    broken as zero for a lifetime or a timeout (`why` says what goes wrong below `minimum`)."""
    return Annotated[str, AfterValidator(lambda text: check_go_at_least(text, minimum, why, zero_ok))]


def own_at_least(minimum: str, why: str, maximum_days: int | None = None, why_most: str = "") -> Any:
    """A kubesmith duration (Duration) of at least `minimum`, for the same reason as go_at_least, and
    at most `maximum_days` when given (`why_most`: what a longer one breaks)."""
    def check(value: str) -> str:
        if parse_duration(value) < parse_duration(minimum):
            raise ValueError(f"{value!r} is shorter than {minimum}, the shortest kubesmith takes here: {why}")
        if maximum_days is not None and parse_duration(value) > maximum_days * 86400:
            raise ValueError(f"{value!r} is longer than {maximum_days} days, the longest kubesmith takes here: "
                             f"{why_most}")
        return value
    return Annotated[str, AfterValidator(_duration), AfterValidator(check)]


def _cis_id(value: str) -> str:
    if not re.fullmatch(r"[1-5](\.[0-9]{1,2}){1,2}", value):
        raise ValueError(f"{value!r} is not a CIS Kubernetes Benchmark check id (such as \"1.2.15\")")
    return value


IPAddress = Annotated[str, AfterValidator(canonical_ip)]
Cidr = Annotated[str, AfterValidator(_cidr)]
DnsLabel = Annotated[str, AfterValidator(_dns_label)]
DnsName = Annotated[str, AfterValidator(_dns_subdomain)]
HostPort = Annotated[str, AfterValidator(_host_port)]
LabelKey = Annotated[str, AfterValidator(_label_key)]
LabelValue = Annotated[str, AfterValidator(_label_value)]
Taint = Annotated[str, AfterValidator(_taint)]
ImageReference = Annotated[str, AfterValidator(_image_reference)]
Text = Annotated[str, AfterValidator(_text)]
InterfaceName = Annotated[str, AfterValidator(_interface_name)]
HttpsUrl = Annotated[str, AfterValidator(_https_url)]
ReleaseVersion = Annotated[str, AfterValidator(_semver)]
Port = Annotated[int, Field(ge=1, le=65535)]
PortRange = Annotated[str, AfterValidator(_port_range)]
AbsolutePath = Annotated[str, AfterValidator(_absolute_path)]
LocalPath = Annotated[str, AfterValidator(_text), AfterValidator(_path_length)]  # a file on the machine running kubesmith
GoDuration = Annotated[str, AfterValidator(check_go_length)]  # 0 or more
GoPeriod = Annotated[str, AfterValidator(check_go_period)]  # more than 0
Duration = Annotated[str, AfterValidator(_duration)]
CisId = Annotated[str, AfterValidator(_cis_id)]
ListItem = Annotated[str, AfterValidator(_list_item)]
SubjectName = Annotated[str, AfterValidator(_san)]


def at_most(limit: int, what: str, why: str) -> Any:
    """A list or map of at most `limit` entries, counted before any entry is checked: a 1 MiB file holds
    ~100,000 entries, and a check per entry (a flag's or plugin's close-name search, a file read, a message
    per entry) made validate take minutes. `what` names the entries, `why` says why `limit` is plenty."""
    def check(value: Any) -> Any:
        if isinstance(value, (list, dict)) and len(value) > limit:
            raise ValueError(f"{len(value)} {what}, more than {limit}: {why}")
        return value
    return BeforeValidator(check)


# Bounds of the lists and maps whose entries are checked one by one (at_most), each far above any real use
# (tests/test_hostile_round5.py validates a file with every list at its bound in well under a second each)
MAX_HOSTS = 10_000  # twice Kubernetes' largest supported cluster (5,000 nodes); the plan benchmark's size
MAX_LABELS = 1_000  # labels of one node or of the cluster's metadata
MAX_EXTRA_ARGS = 500  # a binary has at most ~180 flags (kube-apiserver 1.36: 175)
MAX_NAMES = 100  # authorization modes (6), admission plugins (43), address types (5), cipher suites (~30), CIS ids
MAX_SERVERS = 100  # DNS servers, resolvers, CA URLs
MAX_TAINTS = 100  # taints a node registers with
MAX_IMAGES = 500  # image archives imported on every node
MAX_ZONES = 1_000  # CoreDNS stub domains and server blocks
MAX_DIRECTIVES = 1_000  # lines of one CoreDNS server block
MAX_ADDONS = 200  # add-on entries (each a file or a directory of manifests)


def _flag_value(value: Any) -> str | int | bool:
    if isinstance(value, (str, int, bool)):
        return value
    raise ValueError(f"a flag value must be a string, integer or boolean, got {yaml_text(value)}")


FlagValue = Annotated[Any, PlainValidator(_flag_value), WithJsonSchema({"type": ["string", "integer", "boolean"]})]
ExtraArgs = Annotated[dict[str, FlagValue], at_most(MAX_EXTRA_ARGS, "flags", "a binary has at most ~180")]
ExtraConfig = dict[str, Any]
def _gate_name(value: str) -> str:
    """A feature gate's name: letters and digits. A name with `=` or `,` would add gates of its own to the
    comma-separated --feature-gates (`"AllAlpha=true,X": false` turned every alpha gate on)."""
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9]{0,127}", value):
        raise ValueError(f"{value!r} is not a feature gate name (letters and digits, such as InPlacePodVerticalScaling)")
    return value


# apiserver.extraSans: 10,000 names made a 187 KB certificate, over OpenSSL's default 100 KB max_cert_list
# (curl, Python, kubesmith's own probes); 30,000 went over Go's 256 KiB handshake message. 1,000 names of
# 64 characters stay near 70 KB.
MAX_EXTRA_SANS = 1000
MAX_FEATURE_GATES = 300  # Kubernetes 1.36 knows 229 gates, 163 of them settable: 300 holds every one and more
MAX_GATE_HINTS = 20  # unknown gates that get a "did you mean" (a close-name search over every known gate)


def gate_count_problem(count: int) -> str:
    return (f"{count} feature gates, more than {MAX_FEATURE_GATES}: a Kubernetes release has fewer than that "
            "(1.36 knows 229, 163 of them settable); list only the gates you change")


def _gate_count(value: Any) -> Any:
    """Bounded: each gate is checked against the release's, and 75,000 of them (a 1 MiB file) never
    finished validating. Counted before the names are, so a huge map gets one error, not one per name."""
    if isinstance(value, dict) and len(value) > MAX_FEATURE_GATES:
        raise ValueError(gate_count_problem(len(value)))
    return value


FeatureGates = Annotated[dict[Annotated[str, AfterValidator(_gate_name)], bool], BeforeValidator(_gate_count)]


def derived(source: str) -> dict[str, Any]:
    """Schema marker for an option whose default follows another option (shown by `kubesmith options`)."""
    return {"x-derived-from": source}

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


# What an address may not be where another machine (or a pod) must reach it: spec.addresses applies
# these to the cluster file, modules and the command line to their own values
BROADCAST = ipaddress.IPv4Address("255.255.255.255")
THIS_NETWORK = ipaddress.IPv4Network("0.0.0.0/8")
STUB_RESOLVER = ipaddress.IPv4Address("127.0.0.53")


# RFC 6052's well-known prefix: an address in it is an IPv4 address behind a NAT64 translator. A client may
# dial one (an IPv6-only cluster reaching an IPv4 resolver or endpoint); no host or VIP can hold one, since
# the network routes the prefix to the translator
NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def _never_dialled(address: Address) -> str | None:
    if address == BROADCAST:
        return "the broadcast address"
    if address.is_multicast:
        return "a multicast address"
    if address.is_unspecified:
        return "the unspecified address"
    if address.version == 4 and address in THIS_NETWORK:
        return "in 0.0.0.0/8 (\"this network\", RFC 1122), which is never a destination"
    return None


def unusable(address: Address, link_local: bool = False, translated: bool = False) -> str | None:
    """Why no other machine can reach `address`, or None; `link_local`: such an address is fine (a resolver
    the platform offers there); `translated`: the address is only dialled, so one behind NAT64 is fine."""
    if reason := _never_dialled(address):
        return reason
    if address.version == 4 and address.is_reserved:
        return "a reserved address (240.0.0.0/4)"
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local and not link_local:
        return "a link-local address"
    if address.version == 6 and address in NAT64 and not translated:
        v4 = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        return (f"in NAT64's well-known prefix 64:ff9b::/96 (RFC 6052), standing for {v4} behind a translator, "
                "which no host can hold")
    return None


def resolver_unusable(address: Address) -> str | None:
    """Why CoreDNS, in a pod, cannot forward to `address`, or None: a pod's loopback is its own."""
    if address == STUB_RESOLVER:
        return ("systemd-resolved's stub resolver (127.0.0.53), on the host's loopback, which a pod cannot "
                "reach; name the resolvers it forwards to (resolvectl status)")
    reason = unusable(address, link_local=True, translated=True)
    return None if reason is None else f"{reason}, which a pod cannot use as its resolver"


# Go's integer flags: strconv.ParseInt's spellings, and the range of each kind
_GO_INT = re.compile(r"[+-]?(0[xX][0-9a-fA-F_]+|0[oO][0-7_]+|0[bB][01_]+|0[0-7_]*|[1-9][0-9_]*)")
GO_INT_RANGES = {"int": (-(1 << 63), (1 << 63) - 1), "int32": (-(1 << 31), (1 << 31) - 1), "uint": (0, (1 << 64) - 1),
               "uint32": (0, (1 << 32) - 1)}


def go_int(value: Any, kind: str = "int") -> int | None:
    """strconv.ParseInt(text, 0, bits) as pflag calls it (0x, 0o, 0b, a leading 0 for octal, `_`); None: refused."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        number = value
    else:
        text = str(value)
        if len(text) > 80 or not _GO_INT.fullmatch(text) or "__" in text or text.endswith("_"):
            return None  # 80 characters hold any 64-bit integer, even in binary with separators
        digits = text.lstrip("+-")
        octal = len(digits) > 1 and digits[0] == "0" and digits[1].isdigit()
        number = int(text.replace("_", ""), 8) if octal else int(text, 0)
    low, high = GO_INT_RANGES.get(kind, GO_INT_RANGES["int"])
    return number if low <= number <= high else None


# Shortest settings of durations for which 1ns passes "never zero" but breaks as much as zero would:
# an event must outlive the minute it takes someone to look (and each is an etcd lease: seconds churn them)
EventTtl = go_at_least("1m", "events would be gone before anyone reads them, and etcd would churn their "
                             "leases")
# a certificate signed from a CSR must outlive its rotation: kubelets renew at 70-90% of its life, and a
# 1ns one is born expired (the API's own CSR minimum, expirationSeconds, is 10 minutes; an hour leaves room)
SigningDuration = go_at_least("1h", "every certificate signed from a CSR would expire at once or be renewed "
                                    "without end")
# 0 is "no timeout" (CIS 4.2.5 judges it); a user of kubectl exec sits idle for seconds while reading, so a
# timeout under a minute drops every interactive exec, attach and port-forward
StreamingIdleTimeout = go_at_least("1m", "an exec, attach or port-forward would drop while its user reads",
                                   zero_ok=True)
# a snapshot of a large keyspace takes minutes of etcd's disk, and the member keeps only `keep` of them
SnapshotInterval = own_at_least("5m", "snapshots would overlap, load etcd's disk without pause and push "
                                      "each useful one out at once")
# the agent renews at a fraction of a certificate's life: under an hour it renews without end; the CA
# service issues for at most ten years (the CA's own default life; `kubesmith ca serve --validity` too)
CertificateLifetime = own_at_least("1h", "a certificate would expire before its renewal came round",
                                   SERVICE_VALIDITY_MAX_DAYS, "no issued certificate outlives the ten years of "
                                   "its CA (spec.pki.certificateValidityDays takes 3650 at most too)")
# a token must live long enough to be copied to the joining host and used, and at most a year (the token
# store's own bound, which `kubesmith token create` applies to the CA service's default_token_ttl)
TokenTtl = own_at_least("1m", "a join token would expire before it could be used", TOKEN_MAX_DAYS,
                        "the token store takes no longer lifetime, so every `kubesmith token create` would fail")
