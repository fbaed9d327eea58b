"""CIS Kubernetes Benchmark checks, evaluated exactly as kube-bench evaluates them.

Why a re-implementation rather than running kube-bench: the benchmark must hold for what kubesmith
*renders*, before any host exists, in every test run. So checks are evaluated on data - the
component's command line, its config document and its environment - instead of on processes.

Why "exactly": the benchmark's verdict is kube-bench's verdict, quirks included. Flags are found by
substring, values by kube-bench's unescaped regexp, config files only when the flag is absent from
the command line, env only after both. A friendlier evaluator would pass configurations that
kube-bench fails (or the reverse). The rules follow kube-bench `check/test.go` and `check/check.go`
(commit a73ce37, see `cis_checks.json` "semantics") and are pinned by its own unit-test vectors
(`kube_bench_vectors.json`, tests/test_cis.py).

`evaluate_host` applies every automatable `flag` and `config-file` check to one host of a plan;
`evaluate_host_files` the `file-permission`/`file-owner` checks, on what `stat` would print for the
files and directories render, tmpfiles.d and StateDirectory= leave on it; `evaluate_plan` does both
for every host, with the files as `render` would write them.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path, PurePosixPath
from typing import Any, Literal

import yaml

from kubesmith import layout
from kubesmith.plan import credentials
from kubesmith.vocabulary.model import HostPlan, Plan, Service

State = Literal["PASS", "FAIL", "WARN", "INFO"]
AuditUsed = Literal["command", "config", "env"]

# kube-bench component name -> the binary kubesmith runs for it
COMPONENT_BINARIES: dict[str, str] = {
    "apiserver": "kube-apiserver", "controller-manager": "kube-controller-manager", "scheduler": "kube-scheduler",
    "etcd": "etcd", "kubelet": "kubelet", "proxy": "kube-proxy",
}
EVALUATED_TYPES = ("flag", "config-file")

_GO_SPACE = "\t\n\f\r "  # Go's regexp \s: RE2 has no Unicode spaces, unlike Python's \s


class CisError(Exception):
    """A check or path expression kube-bench could not evaluate (kube-bench reports the item as failed)."""


# ---- the check model

@dataclass(frozen=True, slots=True)
class TestItem:
    """One `test_items` entry. `set` defaults to true, as kube-bench's UnmarshalYAML does."""

    flag: str = ""
    path: str = ""
    env: str = ""
    op: str = ""
    value: str = ""
    set: bool = True

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TestItem:
        compare = data.get("compare") or {}
        return cls(flag=data.get("flag") or "", path=data.get("path") or "", env=data.get("env") or "",
                   op=data.get("op") or compare.get("op") or "",
                   value=_text(data.get("value") if data.get("value") is not None else compare.get("value")),
                   set=data.get("set", True) is not False)


@dataclass(frozen=True, slots=True)
class Check:
    """What the evaluation needs of a kube-bench check; `audit_config` only says whether one exists."""

    id: str
    tests: tuple[TestItem, ...]
    scored: bool = True
    bin_op: str = ""
    use_multiple_values: bool = False
    audit_config: str = ""
    kube_bench_type: str = ""  # "", "manual" or "skip"
    component: str = ""
    type: str = ""  # cis_checks.json's classification: flag, config-file, file-permission, ...
    evaluation: str = ""  # flags, flags-then-config, encryption-provider-config, ...
    automatable: bool = True
    text: str = ""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Check:
        tests = () if data.get("has_tests") is False else tuple(TestItem.from_dict(t) for t in data.get("tests") or ())
        return cls(id=str(data.get("id", "")), tests=tests,
                   scored=bool(data.get("scored", True)), bin_op=data.get("bin_op") or "",
                   use_multiple_values=bool(data.get("use_multiple_values")),
                   audit_config=data.get("audit_config") or "", kube_bench_type=data.get("kube_bench_type") or "",
                   component=data.get("component") or "", type=data.get("type") or "",
                   evaluation=data.get("evaluation") or "", automatable=bool(data.get("automatable", True)),
                   text=data.get("text") or "")


@dataclass(frozen=True, slots=True)
class ItemResult:
    passed: bool
    found: bool
    used: AuditUsed
    value: str = ""
    error: str = ""


@dataclass(frozen=True, slots=True)
class CheckResult:
    id: str
    state: State
    passed: bool  # kube-bench's testResult (an unscored check that fails is WARN, not FAIL)
    items: tuple[ItemResult, ...] = ()
    reason: str = ""


def load_checks(path: Path) -> list[Check]:
    """The checks of a `cis_checks.json` file, in file order."""
    return [Check.from_dict(item) for item in json.loads(Path(path).read_text(encoding="utf-8"))["checks"]]


# ---- compare

def compare(op: str, found: str, expected: str) -> bool:
    """kube-bench compareOp: the verdict for one found value. Unknown ops (and "") fail."""
    if op in ("eq", "noteq"):
        lowered = found.lower()
        equal = lowered == expected if lowered in ("true", "false") else found == expected
        return equal if op == "eq" else not equal
    if op in ("gt", "gte", "lt", "lte"):
        a, b = _atoi(found), _atoi(expected)
        if a is None or b is None:
            return False
        return {"gt": a > b, "gte": a >= b, "lt": a < b, "lte": a <= b}[op]
    if op == "has":
        return expected in found
    if op == "nothave":
        return expected not in found
    if op == "regex":
        return re.search(expected, found) is not None
    if op == "valid_elements":
        return _all_elements_valid(_split_elements(found), _split_elements(expected))
    if op == "bitmask":
        requested, allowed = _parse_octal(found), _parse_octal(expected)
        return requested is not None and allowed is not None and (allowed & requested) == requested
    return False


def _atoi(text: str) -> int | None:
    """Go strconv.Atoi after TrimSpace: optional sign, ASCII digits, int64 range - nothing else."""
    text = text.strip()
    if not re.fullmatch(r"[+-]?[0-9]+", text):
        return None
    number = int(text)
    return number if -(2 ** 63) <= number < 2 ** 63 else None


def _parse_octal(text: str) -> int | None:
    """Go strconv.ParseInt(s, 8, 64): no prefix, no underscores, no spaces."""
    if not re.fullmatch(r"[+-]?[0-7]+", text):
        return None
    number = int(text, 8)
    return number if -(2 ** 63) <= number < 2 ** 63 else None


def _split_elements(text: str) -> list[str]:
    cleaned = text.strip().rstrip(",")
    return [part.strip() for part in cleaned.split(",")] if cleaned else []


def _all_elements_valid(found: list[str], allowed: list[str]) -> bool:
    if not found and not allowed:
        return True
    if not found or not allowed:
        return False
    return all(element in allowed for element in found)


# ---- finding a value: command line, config document, environment

def find_flag(text: str, flag: str) -> tuple[bool, str]:
    """kube-bench flagTestItem.findValue: substring match, then the first regexp match gives the value."""
    if not text or not flag or flag not in text:
        return False, ""
    match = re.search(f"({flag})(=|: *)*([^{_GO_SPACE}]*) *", text)
    if match is None:
        raise CisError(f"invalid flag in testItem definition: {text}")
    if match.group(3):
        return True, match.group(3)
    return True, "true" if flag.startswith("--") else match.group(1)


def find_env(text: str, name: str) -> tuple[bool, str]:
    """kube-bench envTestItem.findValue: the first `NAME=value` (NAME unanchored, as in kube-bench)."""
    if not text or not name:
        return False, ""
    match = re.search(f"{name}=.*(?:\\Z|\\n)", text)  # Go's `$` without (?m) is \Z
    value = match.group(0).replace("\n", "", 1).replace(f"{name}=", "", 1) if match else ""
    return bool(value), value


def find_path(text: str, path: str) -> tuple[bool, str]:
    """kube-bench pathTestItem.findValue: JSON else YAML, then k8s jsonpath with missing keys allowed."""
    value = jsonpath(path, parse_document(text))
    return value != "", value


def parse_document(text: str) -> Any:
    """Go encoding/json first (numbers are float64), else gopkg.in/yaml.v2 (timestamps stay strings)."""
    try:
        return json.loads(text, parse_int=float, parse_constant=_reject_constant)
    except ValueError:
        pass
    try:
        return yaml.load(text, Loader=_GoYamlLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise CisError(f"failed to load YAML or JSON from input {text!r}: {exc}") from None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


class _GoYamlLoader(yaml.SafeLoader):
    """SafeLoader without the timestamp resolver: yaml.v2 leaves timestamps as strings in interface{}."""


_GoYamlLoader.yaml_implicit_resolvers = {
    key: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for key, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


# ---- a small k8s jsonpath: fields, `[:]` under range, `{}` (current), quoted literals, range/end

_ACTION = re.compile(r"\{((?:'[^']*'|\"[^\"]*\"|[^{}'\"])*)\}")


def jsonpath(template: str, document: Any) -> str:
    """Execute a k8s jsonpath template (AllowMissingKeys) and print the results as kubectl does."""
    pieces: list[tuple[str, str]] = []  # ("text"|"action", source)
    position = 0
    for match in _ACTION.finditer(template):
        if match.start() > position:
            pieces.append(("text", template[position:match.start()]))
        pieces.append(("action", match.group(1).strip()))
        position = match.end()
    rest = template[position:]
    if "{" in rest or "}" in rest:
        raise CisError(f"unclosed action in {template!r}")
    if rest:
        pieces.append(("text", rest))
    out: list[str] = []
    _run(pieces, 0, len(pieces), document, out, template)
    return "".join(out)


def _run(pieces: list[tuple[str, str]], start: int, end: int, current: Any, out: list[str], template: str) -> None:
    index = start
    while index < end:
        kind, source = pieces[index]
        if kind == "text":
            out.append(source)
        elif source.startswith("range "):
            close = _matching_end(pieces, index, end, template)
            for item in _select(source[len("range "):].strip(), current, template):
                _run(pieces, index + 1, close, item, out, template)
            index = close
        elif source == "end":
            raise CisError(f"unexpected {{end}} in {template!r}")
        elif len(source) >= 2 and source[0] == source[-1] and source[0] in "'\"":
            out.append(source[1:-1])
        else:
            out.extend(_print(value) for value in _select(source, current, template))
        index += 1


def _matching_end(pieces: list[tuple[str, str]], index: int, end: int, template: str) -> int:
    depth = 0
    for position in range(index + 1, end):
        kind, source = pieces[position]
        if kind == "action" and source.startswith("range "):
            depth += 1
        elif kind == "action" and source == "end":
            if depth == 0:
                return position
            depth -= 1
    raise CisError(f"range without end in {template!r}")


def _select(expression: str, current: Any, template: str) -> list[Any]:
    """Values an expression selects; a missing key selects nothing (AllowMissingKeys)."""
    if expression in ("", "@"):
        return [current]
    tokens = re.findall(r"\.([A-Za-z0-9_\-/]+)|(\[:\])|(.)", expression.removeprefix("@"))
    values = [current]
    for field, whole, junk in tokens:
        if junk:
            raise CisError(f"unsupported jsonpath syntax {expression!r} in {template!r}")
        if field:
            values = [value[field] for value in values if isinstance(value, dict) and field in value]
        else:
            for value in values:
                if not isinstance(value, list):
                    raise CisError(f"{expression!r}: not an array or slice")
            values = [item for value in values for item in value]
    return values


def _print(value: Any) -> str:
    """fmt.Fprint of a decoded value; maps and lists as JSON, as the k8s jsonpath printer does."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _go_float(value)
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    return str(value)


def _go_float(number: float) -> str:
    """Go's %v for float64 (JSON numbers): shortest digits, exponent form when exp < -4 or exp >= 6 (1e+06)."""
    if number != number:
        return "NaN"
    if number in (float("inf"), float("-inf")):
        return "+Inf" if number > 0 else "-Inf"
    if number == 0:
        return "-0" if str(number).startswith("-") else "0"
    sign, digit_tuple, exponent = Decimal(repr(number)).as_tuple()
    digits = "".join(map(str, digit_tuple))
    point = len(digits) + int(exponent)  # digits before the decimal point
    digits = digits.rstrip("0")
    prefix = "-" if sign else ""
    exp10 = point - 1
    if exp10 < -4 or exp10 >= 6:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{prefix}{mantissa}e{'-' if exp10 < 0 else '+'}{abs(exp10):02d}"
    if point <= 0:
        return f"{prefix}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return prefix + digits + "0" * (point - len(digits))
    return f"{prefix}{digits[:point]}.{digits[point:]}"


# ---- evaluating items and checks

def _find(item: TestItem, text: str, used: AuditUsed) -> tuple[bool, str]:
    if used == "env":
        return find_env(text, item.env)
    if used == "config":
        return find_path(text, item.path)
    return find_flag(text, item.flag)


def _evaluate_line(item: TestItem, text: str, used: AuditUsed) -> ItemResult:
    try:
        found, value = _find(item, text, used)
    except (CisError, re.error) as exc:  # kube-bench: failTestItem, i.e. not passed and not found
        return ItemResult(False, False, used, error=str(exc))
    if not item.set:
        return ItemResult(not found, found, used, value)
    if found and item.op:
        return ItemResult(compare(item.op, value, item.value), True, used, value)
    return ItemResult(found, found, used, value)


def _execute(item: TestItem, text: str, used: AuditUsed, multiple: bool) -> ItemResult:
    """One item on one audit output; with use_multiple_values every line must pass."""
    text = text.rstrip(" \n")
    result = ItemResult(False, False, used)
    for line in text.split("\n") if multiple else [text]:
        result = _evaluate_line(item, line, used)
        if not result.passed:
            break
    return result


def evaluate_check(check: Check, audit: str, config: str = "", env: str = "") -> CheckResult:
    """kube-bench Check.run on given audit outputs: command line first, then config, then env.

    `config` is consulted only when the check has an `audit_config` (kube-bench gates on the
    command, not its output); `env` whenever an item names an env variable and was not found yet.
    """
    failed: State = "FAIL" if check.scored else "WARN"
    if check.kube_bench_type == "skip":
        return CheckResult(check.id, "INFO", False, reason="type skip")
    if check.kube_bench_type == "manual":
        return CheckResult(check.id, "WARN", False, reason="manual check")
    if not check.tests:
        return CheckResult(check.id, failed, False, reason="No tests defined")
    results = []
    for item in check.tests:
        result = _execute(item, audit, "command", check.use_multiple_values)
        if not result.found and check.audit_config:
            result = _execute(item, config, "config", check.use_multiple_values)
        if not result.found and item.env:
            result = _execute(item, env, "env", check.use_multiple_values)
        results.append(result)
    if check.bin_op in ("", "and"):
        passed = all(result.passed for result in results)
    elif check.bin_op == "or":
        passed = any(result.passed for result in results)
    else:
        return CheckResult(check.id, failed, False, tuple(results), f"unknown binary operator {check.bin_op!r}")
    return CheckResult(check.id, "PASS" if passed else failed, passed, tuple(results))


# ---- kubesmith hosts

def command_line(service: Service) -> str:
    """What `ps` shows for a service: the binary, then its arguments."""
    return " ".join((service.binary, *service.argv))


def environment(service: Service) -> str:
    """What `cat /proc/<pid>/environ | tr '\\0' '\\n'` shows: one NAME=value a line."""
    return "\n".join(f"{name}={value}" for name, value in service.environment)


def argv_value(service: Service, flag: str) -> str | None:
    """A flag's value as the component itself parses it (`--flag=v` or `--flag v`; last one wins)."""
    value = None
    args = list(service.argv)
    for index, arg in enumerate(args):
        if arg.startswith(flag + "="):
            value = arg[len(flag) + 1:]
        elif arg == flag and index + 1 < len(args):
            value = args[index + 1]
    return value


def encryption_audit(cmdline: str, files: Mapping[str, str]) -> str:
    """The audit of 1.2.28, shell-free: the provider line after `providers:` as `provider=<word>` lines.

    kube-bench: path = sed 's%.*encryption-provider-config[= ]\\([^ ]*\\).*%\\1%' on the ps line,
    then `grep -A1 'providers:' FILE | tail -n1 | grep -o "[A-Za-z]*" | sed 's/^/provider=/'`.
    """
    if "--encryption-provider-config" not in cmdline:
        return ""
    match = re.match(r".*encryption-provider-config[= ]([^ ]*)", cmdline)
    text = files.get(match.group(1)) if match else None
    if text is None:
        return ""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    hits = [i for i, line in enumerate(lines) if "providers:" in line]
    if not hits:
        return ""
    last = lines[min(hits[-1] + 1, len(lines) - 1)]  # tail -n1 of grep -A1: the line after the last hit
    return "\n".join(f"provider={word}" for word in re.findall(r"[A-Za-z]+", last))


@dataclass(frozen=True, slots=True)
class HostCheck:
    host: str
    component: str
    binary: str
    result: CheckResult


def applicable(checks: Iterable[Check]) -> list[Check]:
    """The automatable checks decided by a component's flags or config files."""
    return [check for check in checks if check.automatable and check.type in EVALUATED_TYPES
            and check.component in COMPONENT_BINARIES]


def evaluate_host(checks: Iterable[Check], host: HostPlan, files: Mapping[str, str]) -> list[HostCheck]:
    """Every applicable check whose component runs on `host`; `files` maps host paths to their text."""
    services = {service.binary: service for service in host.services}
    outcomes = []
    for check in applicable(checks):
        binary = COMPONENT_BINARIES[check.component]
        service = services.get(binary)
        if service is None:
            continue
        audit, config = command_line(service), ""
        if check.evaluation == "encryption-provider-config":
            audit = encryption_audit(audit, files)
        if check.audit_config:
            config_path = argv_value(service, "--config")
            config = files.get(config_path, "") if config_path else ""
        result = evaluate_check(check, audit, config, environment(service))
        outcomes.append(HostCheck(host.name, check.component, binary, result))
    return outcomes


def evaluate_plan(checks: Sequence[Check], plan: Plan, state_dir: Path,
                  file_checks: Sequence[FileCheck] = ()) -> list[HostCheck]:
    """Every host of a plan, against the bytes `render` would write (issuing what the PKI lacks), and
    `file_checks` against the owners and modes render and systemd leave on the host."""
    from kubesmith.backends.render import Shipped, bundles  # the PKI stack is only needed here

    rendered = bundles(plan, state_dir, shipped=Shipped())  # files and units, as `render` writes them
    outcomes = []
    for host in plan.hosts:
        files = with_credentials(host, {file.path: file.data for file in rendered[host.name]})
        outcomes += evaluate_host(checks, host, files)
        outcomes += evaluate_host_files(file_checks, host, host_entries(rendered[host.name]))
    return outcomes


class TextOnRead(Mapping[str, str]):
    """Rendered files as text, each decoded when a check reads it: a host's bundle holds image archives
    and binaries of many MB that no check reads, and decoding them all cost most of this module's time."""

    def __init__(self, data: Mapping[str, bytes], aliases: Mapping[str, str] | None = None) -> None:
        self._data, self._aliases = data, dict(aliases or {})

    def __getitem__(self, path: str) -> str:
        return self._data[self._aliases.get(path, path)].decode("utf-8", "replace")

    def __iter__(self) -> Iterator[str]:
        yield from self._data
        yield from (alias for alias in self._aliases if alias not in self._data)

    def __len__(self) -> int:
        return len(self._data) + sum(alias not in self._data for alias in self._aliases)


def with_credentials(host: HostPlan, files: Mapping[str, bytes]) -> TextOnRead:
    """The host's files plus what systemd's LoadCredential= puts under /run/credentials at each start."""
    aliases = {layout.credential_path(service.name, name): source
               for service in host.services for name, source in service.credentials}
    missing = [source for source in aliases.values() if source not in files]
    assert not missing, f"credentials from files the host does not get: {missing}"
    return TextOnRead(files, aliases)


# ---- file-metadata checks (owners and modes), as `stat` would print them on the host

@dataclass(frozen=True, slots=True)
class FileCheck:
    """A `file-permission`/`file-owner` check and the host files it audits (`file_target` in the data)."""

    check: Check
    roles: tuple[str, ...]
    select: str  # self, tree, children, self_or_tree
    name_glob: str | None
    stat_format: str
    owner_component: str
    automated: bool  # the benchmark's "(Automated)"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FileCheck:
        target = data["file_target"]
        return cls(Check.from_dict(data), tuple(target["roles"]), target["select"], target.get("name_glob"),
                   target["stat_format"], target["owner_component"], bool(data.get("benchmark_automated")))


def load_file_checks(path: Path) -> list[FileCheck]:
    return [FileCheck.from_dict(item) for item in json.loads(Path(path).read_text(encoding="utf-8"))["checks"]
            if item.get("evaluation") == "file-metadata"]


@dataclass(frozen=True, slots=True)
class Entry:
    path: str
    mode: int
    owner: str
    group: str
    directory: bool = False


def host_entries(rendered: Iterable[Any]) -> dict[str, Entry]:
    """Files as render lists them; directories as tmpfiles.d and StateDirectory= make them, and every
    other parent as apply creates it (root, 0755)."""
    entries = {f.path: Entry(f.path, f.mode, f.owner, f.group) for f in rendered}
    texts = TextOnRead({f.path: f.data for f in rendered})
    directories: dict[str, Entry] = {}
    for path in texts:
        if path.startswith("/usr/lib/tmpfiles.d/"):
            text = texts[path]
            for line in text.splitlines():
                fields = line.split()
                if len(fields) >= 5 and fields[0] == "d":
                    directories[fields[1]] = Entry(fields[1], int(fields[2], 8), fields[3], fields[4], True)
        elif path.startswith(layout.UNIT_DIR + "/") and path.endswith(".service"):
            text = texts[path]
            settings = dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith(" "))
            if "StateDirectory" in settings:
                state = f"{layout.LIB}/{settings['StateDirectory']}"
                directories[state] = Entry(state, int(settings.get("StateDirectoryMode", "0755"), 8),
                                           settings.get("User", "root"), settings.get("Group", "root"), True)
    for path in list(entries):
        for parent in PurePosixPath(path).parents:
            directories.setdefault(str(parent), Entry(str(parent), 0o755, "root", "root", True))
    return {**directories, **entries}


FILE_COMPONENT_BINARIES = {**COMPONENT_BINARIES, "controller_manager": "kube-controller-manager"}


def role_paths(role: str, host: HostPlan) -> list[str]:
    """The host path a `file_target` role names, from the services' own flags and documents."""
    services = {service.binary: service for service in host.services}
    def flag(binary: str, name: str) -> list[str]:
        service = services.get(binary)
        value = argv_value(service, name) if service else None
        return [credentials.disk_path(value, service)] if value and service else []
    if role.endswith("_pod_spec_or_unit") or role == "kubelet_service_unit":
        binary = FILE_COMPONENT_BINARIES[role.removesuffix("_pod_spec_or_unit").removesuffix("_service_unit")]
        return [f"{layout.UNIT_DIR}/{binary}.service"] if binary in services else []
    return {
        "etcd_data_dir": lambda: flag("etcd", "--data-dir"),
        "kubeconfig_admin": lambda: [layout.kubeconfig_path("admin")],
        "kubeconfig_super_admin": lambda: [layout.kubeconfig_path("super-admin")],
        "kubeconfig_scheduler": lambda: flag("kube-scheduler", "--authentication-kubeconfig"),
        "kubeconfig_controller_manager": lambda: flag("kube-controller-manager", "--kubeconfig"),
        "kubeconfig_kubelet": lambda: flag("kubelet", "--kubeconfig"),
        "kubeconfig_proxy": lambda: [layout.kubeconfig_path("kube-proxy")],
        "kubelet_config_file": lambda: flag("kubelet", "--config"),
        "kubelet_client_ca_file": lambda: [layout.pki_path("ca.crt")],
        "pki_dir": lambda: [layout.PKI],
        "cni_conf_dir": lambda: ["/etc/cni/net.d"],
    }[role]()


def _selected(target: FileCheck, root: str, entries: Mapping[str, Entry]) -> list[Entry]:
    if root not in entries:
        return []  # the audits start with `test -e`: nothing printed
    below = [entry for path, entry in sorted(entries.items()) if path.startswith(root.rstrip("/") + "/")]
    chosen = {"self": [entries[root]], "tree": [entries[root], *below], "children": below,
              "self_or_tree": [entries[root], *below]}[target.select]
    if target.name_glob:
        chosen = [entry for entry in chosen if fnmatch.fnmatch(PurePosixPath(entry.path).name, target.name_glob)]
    return chosen


def stat_line(entry: Entry, form: str) -> str:
    """`stat -c FORM`: %a octal mode, %U owner, %G group, %n name."""
    values = {"%a": f"{entry.mode:o}", "%U": entry.owner, "%G": entry.group, "%n": entry.path}
    return re.sub(r"%[aUGn]", lambda match: values[match.group(0)], form)


def file_check_hosts(target: FileCheck, host: HostPlan) -> bool:
    """Control-plane checks (1.1) on hosts running the API server or etcd, node checks (4.1) on kubelet hosts."""
    running = {service.binary for service in host.services}
    binary = FILE_COMPONENT_BINARIES.get(target.owner_component.replace("-", "_"),
                                         "kubelet" if target.check.id.startswith("4.") else "kube-apiserver")
    return binary in running


def evaluate_host_files(file_checks: Iterable[FileCheck], host: HostPlan, entries: Mapping[str, Entry]
                        ) -> list[HostCheck]:
    outcomes = []
    for target in file_checks:
        if not file_check_hosts(target, host):
            continue
        selected = [entry for role in target.roles for path in role_paths(role, host)
                    for entry in _selected(target, path, entries)]
        audit = "\n".join(stat_line(entry, target.stat_format) for entry in selected)
        result = evaluate_check(target.check, audit)
        outcomes.append(HostCheck(host.name, "file", target.owner_component, result))
    return outcomes


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
