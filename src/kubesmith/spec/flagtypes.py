"""A flag's text as its binary's flag parsing reads it: one parser per flag type, with Go's semantics.

Each Kubernetes binary names a flag's type in its `--help` (`--address ip`, `--kube-reserved
mapStringString`, `--tls-curve-preferences int32Slice`), and the version registry keeps that type for every
flag (versions/data; the map types refined by asking the binary which separator it takes). A value the
type's parser refuses stops the binary before anything starts ("invalid argument ... for --flag"), so it
is refused here with the same rule, whatever the flag. Booleans, durations, integers and floats are
effective.flag_value_problem's; what a well-typed value then means is left to the per-flag checks.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from decimal import Decimal, localcontext
from typing import Any

from kubesmith.vocabulary.errors import yaml_text
from kubesmith.vocabulary.types import go_int

# resource.Quantity's text: a signed decimal, then a binary (Ki...), decimal (n, u, m, k, M...) or exponent suffix
QUANTITY = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?")
_DIGITS = re.compile(r"[+-]?\d+")


def quantity_problem(value: Any) -> str | None:
    """Why the text `value` is no resource.Quantity, or None (other types: the number and type checks)."""
    if not isinstance(value, str) or QUANTITY.fullmatch(value):
        return None
    return f"{yaml_text(value)} is no resource quantity (such as 500m, 1Gi or 2)"


# resource.Quantity's suffixes and the factor each stands for (an exponent suffix, e3, is read apart)
_SUFFIX_FACTORS = {"": Decimal(1), **{suffix: Decimal(2) ** (10 * power) for power, suffix in
                                      enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"), start=1)},
                   **{suffix: Decimal(10) ** power for suffix, power in
                      (("n", -9), ("u", -6), ("m", -3), ("k", 3), ("M", 6), ("G", 9), ("T", 12), ("P", 15),
                       ("E", 18))}}


def quantity_value(text: str) -> Decimal | None:
    """The amount a resource.Quantity text stands for (`1Gi` is 1073741824, `500m` 0.5), None when it is
    none. Exact: `1e400` is read as such, not as a float's infinity."""
    match = QUANTITY.fullmatch(text)
    if match is None:
        return None
    number, suffix = text[:match.start(3)] if match.group(3) else text, match.group(3) or ""
    with localcontext() as context:
        context.prec, context.Emax, context.Emin = 60, 10**11, -10**11
        if suffix not in _SUFFIX_FACTORS:  # an exponent (`E` alone is exa, `Ei` exbi)
            exponent = int(suffix[1:])  # Go reads it as an int32 ("unable to parse quantity's suffix")
            return Decimal(number).scaleb(exponent) if -(1 << 31) <= exponent < 1 << 31 else None
        return Decimal(number) * _SUFFIX_FACTORS[suffix]


def go_ip(text: str) -> bool:
    """netutils.ParseIPSloppy, as Kubernetes' IP flags call it: IPv4 parts may have leading zeros (read as
    decimal), no IPv6 zone, no surrounding whitespace."""
    parts = text.split(".")
    if ":" not in text:
        return len(parts) == 4 and all(part.isdigit() and part.isascii() and int(part) <= 255 for part in parts)
    if "%" in text or text != text.strip():
        return False
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def _ip(text: str) -> str | None:
    # empty is the flag's "unset" (pflag's and component-base's IP flags take it)
    return None if text == "" or go_ip(text) else "not an IP address"


def _ip_port(text: str) -> str | None:
    """component-base's IPPortVar: empty, an IP, or IP:port (net.SplitHostPort, a port from 0 to 65535)."""
    if text == "" or go_ip(text):
        return None
    if text.startswith("["):
        host, bracket, rest = text[1:].partition("]")
        port = rest[1:] if bracket and rest.startswith(":") else None
    else:
        host, colon, port = text.partition(":")
        port = port if colon and ":" not in port else None
    if port is None or not go_ip(host):
        return "not an IP address or IP:port"
    return None if _DIGITS.fullmatch(port) and 0 <= int(port) <= 65535 else f"port {port!r} is not from 0 to 65535"


def _pairs(separator: str, split: bool) -> Callable[[str], str | None]:
    """component-base's MapStringString (`=`, split at commas, or the whole value one pair) and
    LangleSeparatedMapStringString (`<`): every non-empty item holds the separator."""
    def parse(text: str) -> str | None:
        items = [item for item in text.split(",") if item] if split else [text]
        odd = next((item for item in items if separator not in item), None)
        return None if odd is None else f"{odd!r} is no key{separator}value pair"
    return parse


def _string_to_string(text: str) -> str | None:
    """pflag's stringToString: no `=` at all is refused; one makes the whole value one pair; more are read
    as a CSV record of pairs (a quoted record is left to the binary)."""
    if "=" not in text:
        return f"{text!r} is no key=value pair"
    if text.count("=") == 1 or '"' in text:
        return None
    odd = next((item for item in text.split(",") if "=" not in item), None)
    return None if odd is None else f"{odd!r} is no key=value pair"


def _int32_slice(text: str) -> str | None:
    """pflag's int32Slice: every comma-separated item a Go int32 (strconv.ParseInt(item, 0, 32))."""
    odd = next((item for item in text.split(",") if go_int(item, "int32") is None), None)
    return None if odd is None else f"{odd!r} is no 32-bit integer"


def _named_cert_key(text: str) -> str | None:
    """component-base's NamedCertKey: "certfile,keyfile", optionally followed by ":name,name..."."""
    files, colon, names = text.partition(":")
    if colon and not names.strip():
        return "the names after ':' are empty"
    return None if len(files.strip().split(",")) == 2 else "expected a certificate and a key file, comma-separated"


def _vmodule(text: str) -> str | None:
    """klog's moduleSpec: comma-separated pattern=N, N a decimal level from 0 (an empty item is skipped)."""
    for item in (item for item in text.split(",") if item):
        pattern, _, level = item.partition("=")
        if not pattern or "=" in level or not _DIGITS.fullmatch(level) or int(level) < 0 or int(level) >= 1 << 31:
            return f"{item!r} is not pattern=N"
    return None


# type (as the registry has it) -> (how the binary reads it, the parser)
PARSERS: dict[str, tuple[str, Callable[[str], str | None]]] = {
    "ip": ("an IP address", _ip),
    "ipport": ("an IP address or IP:port", _ip_port),
    "quantity": ("a resource quantity (such as 500m, 1Gi or 2)",
                 lambda text: None if QUANTITY.fullmatch(text) else "not a quantity"),
    "mapStringString": ("comma-separated key=value pairs", _pairs("=", split=True)),
    "mapStringStringNoSplit": ("one key=value pair", _pairs("=", split=False)),
    "langleSeparatedMapStringString": ("comma-separated signal<threshold pairs (memory.available<100Mi)",
                                       _pairs("<", split=True)),
    "stringToString": ("key=value pairs", _string_to_string),
    "int32Slice": ("a comma-separated list of integers", _int32_slice),
    "namedCertKey": ("certfile,keyfile[:name,...]", _named_cert_key),
    "pattern=N,...": ("comma-separated pattern=N settings", _vmodule),
}


def flag_type_problem(binary: str, flag: str, kind: str | None, text: str) -> str | None:
    """Why `binary`'s flag parsing refuses `text` for `flag` of type `kind`, or None (other kinds: None)."""
    if kind not in PARSERS:
        return None
    what, parse = PARSERS[kind]
    problem = parse(text)
    return None if problem is None else \
        f"{binary} reads --{flag} as {what}, and refuses {text!r} ({problem}): it stops before it starts"
