"""The systemd backend: a host plan becomes unit files, a slice, sysusers.d and tmpfiles.d snippets.

Shape of the result (after the NixOS module's targets, reference/seeds/000_* and 001_*):

* `<svc>.service` per component: gates as `ExecStartPre=kubesmith wait --any ...` (cross-host
  dependencies are gates, never systemd dependencies), `Restart=on-failure` with
  `StartLimitIntervalSec=0` (no start-limit wedge: a component whose dependency comes back
  later recovers by itself), `ConditionPathExists=` per needed file, hardening where the
  component tolerates it.
* `<svc>-online.service` per component: a oneshot with `RemainAfterExit=yes` that runs
  `kubesmith wait` against the component's own readiness probe. It is `BindsTo=` its
  component, so a restart of the component (also systemd's automatic restart, which is a
  restart job) re-runs the readiness check, and a stopped component takes it down.
* targets `Wants=` + `Requisite=` + `After=` the online units of their services and their
  sub-targets: a target is active only when every probe below it passed, and stops when a
  component stops or crashes (the online unit is bound to it). Recovery is pulled, never
  forced: a component that systemd restarts `Upholds=` its online unit again, and an online
  unit that passes starts its target and `kubernetes.target` again (`--no-block`). Requisite=
  never starts a component an operator stopped on purpose (checked on systemd 252 in the lab).
* `<svc>-certs.path` + `<svc>-certs-changed.service`: `PathChanged=` on the component's
  certificates; `systemctl try-restart` the component when one is replaced.

Everything is a pure function returning {path relative to the root file system: text}; only
`write_units` touches the disk, atomically.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from kubesmith import layout
from kubesmith.fsutil import Pending, write_many
from kubesmith.health.probespec import probe_argument
from kubesmith.vocabulary.model import HostPlan, Service, Target

SLICE = "kubernetes.slice"
ENV_DIR = f"{layout.KUBESMITH_ETC}/env"
SYSUSERS_FILE = "usr/lib/sysusers.d/kubesmith.conf"
TMPFILES_FILE = "usr/lib/tmpfiles.d/kubesmith.conf"
UNIT_DIR = layout.UNIT_DIR.lstrip("/")
WRITABLE_PREFIXES = ("/var/log/", "/var/lib/", "/run/")

HARDENING: tuple[tuple[str, str], ...] = (
    ("NoNewPrivileges", "yes"),
    ("ProtectSystem", "strict"),
    ("ProtectHome", "yes"),
    ("PrivateTmp", "yes"),
    ("PrivateDevices", "yes"),
    ("ProtectKernelTunables", "yes"),
    ("ProtectKernelModules", "yes"),
    ("ProtectKernelLogs", "yes"),
    ("ProtectControlGroups", "yes"),
    ("ProtectClock", "yes"),
    ("ProtectHostname", "yes"),
    ("RestrictSUIDSGID", "yes"),
    ("RestrictRealtime", "yes"),
    ("RestrictNamespaces", "yes"),
    ("LockPersonality", "yes"),
    ("RestrictAddressFamilies", "AF_UNIX AF_INET AF_INET6"),
    ("SystemCallArchitectures", "native"),
    ("UMask", "0077"),
)


@dataclass(frozen=True, slots=True)
class UnitOptions:
    """Where binaries live and how long gates and readiness checks may take. `release_dir`: where the
    Kubernetes binaries that apply ships live (`layout.release_dir`); None for binaries that are the
    host's own in `bin_dir` (`kubesmith join`, where the operator installed them)."""

    bin_dir: str = layout.BIN
    release_dir: str | None = None
    kubesmith: str = f"{layout.BIN}/kubesmith"
    gate_deadline: float = 300.0  # a gate failing this long fails the start; Restart= retries
    online_deadline: float = 300.0
    max_interval: float = 2.0


def for_release(version: str) -> UnitOptions:
    """The units of an apply that ships `version`'s binaries into their release's own directory."""
    return UnitOptions(release_dir=layout.release_dir(version))


def online_unit(service: Service) -> str:
    return f"{service.name}-online.service"


def service_unit_names(service: Service) -> frozenset[str]:
    """Every unit this backend may write for one service (`unit_files`): a change to any of them, or to a
    drop-in of its own unit, restarts the service; another unit whose name only begins alike does not."""
    return frozenset({f"{service.name}.service", online_unit(service), f"{service.name}-certs.path",
                      f"{service.name}-certs-changed.service"})


def unit_files(host: HostPlan, options: UnitOptions = UnitOptions()) -> dict[str, str]:
    """Every file the systemd backend contributes to `host`, by path relative to `/`."""
    files: dict[str, str] = {f"{UNIT_DIR}/{SLICE}": slice_unit()}
    for service in host.services:
        files[f"{UNIT_DIR}/{service.name}.service"] = service_unit(service, host, options)
        if service.readiness is not None:
            files[f"{UNIT_DIR}/{online_unit(service)}"] = online_service_unit(service, host, options)
        if service.watch_files:
            files[f"{UNIT_DIR}/{service.name}-certs.path"] = path_unit(service)
            files[f"{UNIT_DIR}/{service.name}-certs-changed.service"] = restart_unit(service)
    for target in host.targets:
        files[f"{UNIT_DIR}/{target.name}.target"] = target_unit(target, host)
    files[SYSUSERS_FILE] = sysusers(host)
    files[TMPFILES_FILE] = tmpfiles(host)
    return files


def unit_file_mode(relative: str) -> int:
    """Unit files root-only, as CIS 1.1.1-1.1.8 and 4.1.1 ask of a component's unit; snippets world-readable."""
    return 0o600 if relative.startswith(UNIT_DIR + "/") else 0o644


def write_units(root: Path, files: dict[str, str]) -> int:
    """Write `files` under `root` atomically (temp + fsync + rename); returns the count."""
    return write_many(Pending(root / relative, text.encode(), unit_file_mode(relative))
                      for relative, text in sorted(files.items()))


# -- rendering helpers -------------------------------------------------------------------------

def render_unit(sections: Iterable[tuple[str, Iterable[tuple[str, str]]]], header: str = "") -> str:
    lines = [f"# {header}", ""] if header else []
    for name, entries in sections:
        body = [f"{key}={value}" for key, value in entries]
        if body:
            lines += [f"[{name}]", *body, ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def escape(argument: str) -> str:
    """One word of a systemd command line, taken literally by systemd: `%` specifiers and `$`
    variables doubled; anything else systemd reads specially (whitespace, quotes, backslashes, a
    leading `#` or `;` that would make a continuation line a comment, control characters that would
    end the line) is quoted, with C escapes for the characters a unit file cannot hold as they are.
    The spec refuses control characters already: this is defence in depth."""
    text = argument.replace("%", "%%").replace("$", "$$")
    if _PLAIN_WORD.fullmatch(text):
        return text
    return '"' + "".join(_quoted_character(character) for character in text) + '"'


_PLAIN_WORD = re.compile(r"[^\s\"'\\;#\x00-\x1f\x7f-\x9f\u2028\u2029][^\s\"'\\\x00-\x1f\x7f-\x9f\u2028\u2029]*")


def _quoted_character(character: str) -> str:
    if character in '"\\':
        return "\\" + character
    if unicodedata.category(character) in ("Cc", "Cs", "Zl", "Zp") or character.isspace() and character != " ":
        if character == "\0" or unicodedata.category(character) == "Cs":
            raise ValueError(f"{character!r} cannot be passed in a command line")
        return f"\\u{ord(character):04x}" if ord(character) <= 0xFFFF else f"\\U{ord(character):08x}"
    return character


def command_line(words: Iterable[str], head: int = 1) -> str:
    """A command line with one argument per continuation line after the first `head` words."""
    escaped = [escape(word) for word in words]
    return " \\\n  ".join([" ".join(escaped[:head]), *escaped[head:]])


def seconds(value: float) -> str:
    return f"{int(math.ceil(value))}s" if value >= 1 else f"{int(value * 1000)}ms"


def wait_command(options: UnitOptions, arguments: Iterable[str], deadline: float, any_of: bool) -> list[str]:
    words = [options.kubesmith, "wait", "--deadline", f"{deadline:g}", "--max-interval", f"{options.max_interval:g}"]
    return words + (["--any"] if any_of else []) + list(arguments)


# -- units -------------------------------------------------------------------------------------

def slice_unit() -> str:
    return render_unit([
        ("Unit", [("Description", "Kubernetes components (kubesmith)"), ("Before", "slices.target")]),
    ], "kubesmith: every Kubernetes component runs in this slice")


def service_unit(service: Service, host: HostPlan, options: UnitOptions) -> str:
    unit: list[tuple[str, str]] = [("Description", service.description)]
    if "network-online.target" in service.after:
        unit.append(("Wants", "network-online.target"))
    unit += [("After", name) for name in service.after]
    unit += [("Requires", name) for name in service.requires]
    if service.watch_files:
        unit.append(("Wants", f"{service.name}-certs.path"))
    if service.readiness is not None:
        unit.append(("Upholds", online_unit(service)))
    unit.append(("StartLimitIntervalSec", "0"))
    unit += [("ConditionPathExists", path) for path in service.needs_files]
    return render_unit([
        ("Unit", unit),
        ("Service", service_section(service, host, options)),
        ("Install", [("WantedBy", service.wanted_by)]),
    ], f"{service.name}: generated by kubesmith for host {host.name}")


def service_section(service: Service, host: HostPlan, options: UnitOptions) -> list[tuple[str, str]]:
    entries: list[tuple[str, str]] = [
        *((("Type", "oneshot"), ("RemainAfterExit", "yes")) if service.oneshot else (("Type", "exec"),)),
        ("User", service.user),
        ("Group", service.group),
        ("Slice", SLICE),
        ("EnvironmentFile", f"-{ENV_DIR}/{service.name}.env"),
    ]
    entries += [("LoadCredential", f"{name}:{source}") for name, source in service.credentials]
    entries += [("Environment", escape(f"{key}={value}")) for key, value in service.environment]
    # a gate probes with the component's client certificate, whose key only root reads (plan/credentials.py):
    # "+" runs kubesmith's check with full privileges, the component itself stays unprivileged
    privileged = "+" if service.user != "root" else ""
    for gate in service.gates:
        arguments = [probe_argument(probe, host) for probe in gate.any_of]
        entries.append(("ExecStartPre", privileged + command_line(
            wait_command(options, arguments, options.gate_deadline, True), head=7)))
    entries += [
        ("ExecStart", command_line([executable(service, options), *service.argv])),
        *((("ExecStop", command_line([executable(service, options), *service.undo])),)
          if service.undo and service.oneshot else ()),
        *((("ExecReload", command_line([executable(service, options), *service.reload])),)
          if service.reload else ()),
        ("Restart", service.restart.policy),
        ("RestartSec", seconds(service.restart.delay_seconds)),
        ("TimeoutStartSec", seconds(options.gate_deadline * max(1, len(service.gates)) + 60)),
        ("TimeoutStopSec", "30s"),
        ("LimitNOFILE", "1048576"),
    ]
    entries += directories(service)
    entries += service.unit_settings
    if service.capabilities:
        entries.append(("AmbientCapabilities", " ".join(service.capabilities)))
    if service.hardening:
        entries += hardening(service)
    return entries


def executable(service: Service, options: UnitOptions) -> str:
    """Shipped binaries live in bin_dir or their release's directory; one named by its absolute path is
    the host's own."""
    return service.binary if service.binary.startswith("/") else binary_path(service.binary, options)


def binary_path(name: str, options: UnitOptions) -> str:
    """Where a shipped binary goes: a Kubernetes binary into its release's directory (so the unit names
    the release, and a unit restored by a rollback names the release it ran), the others into bin_dir."""
    if options.release_dir is not None and name in layout.RELEASE_BINARIES:
        return f"{options.release_dir}/{name}"
    return f"{options.bin_dir}/{name}"


def directories(service: Service) -> list[tuple[str, str]]:
    """StateDirectory= for a data directory under /var/lib (systemd creates and chowns it)."""
    entries: list[tuple[str, str]] = []
    state = service.state_directory
    if state and state.startswith("/var/lib/"):
        entries += [("StateDirectory", state.removeprefix("/var/lib/")), ("StateDirectoryMode", "0700")]
        entries.append(("WorkingDirectory", state))
    return entries


def writable_paths(service: Service) -> tuple[str, ...]:
    """Directories a sandboxed component writes besides its state directory (audit logs, ...).

    The plan has no field for these yet, so they are read from path-valued flags under
    WRITABLE_PREFIXES: the directory of each such flag value.
    """
    found: list[str] = []
    for argument in service.argv:
        value = argument.partition("=")[2]
        if (value.startswith(WRITABLE_PREFIXES) and value != service.state_directory
                and not value.startswith(layout.CREDENTIALS + "/")):
            directory = str(PurePosixPath(value).parent)
            if directory not in found:
                found.append(directory)
    if service.state_directory and not service.state_directory.startswith("/var/lib/"):
        found.append(service.state_directory)
    return tuple(found)


def hardening(service: Service) -> list[tuple[str, str]]:
    entries = list(HARDENING)
    entries += [("ReadWritePaths", f"-{path}") for path in writable_paths(service)]
    if not service.capabilities and service.user != "root":
        entries.append(("CapabilityBoundingSet", ""))
    return entries


def online_service_unit(service: Service, host: HostPlan, options: UnitOptions) -> str:
    assert service.readiness is not None
    argument = probe_argument(service.readiness, host)
    own = f"{service.name}.service"
    return render_unit([
        ("Unit", [
            ("Description", f"kubesmith: {service.name} answers its readiness probe"),
            ("BindsTo", own),
            ("After", own),
            ("Before", f"{service.wanted_by}"),
            ("StartLimitIntervalSec", "0"),
        ]),
        ("Service", [
            ("Type", "oneshot"),
            ("RemainAfterExit", "yes"),
            ("ExecStart", command_line(wait_command(options, [argument], options.online_deadline, False), head=6)),
            ("ExecStartPost", f"systemctl start --no-block {recovered_targets(service)}"),
            ("TimeoutStartSec", seconds(options.online_deadline + 30)),
            ("Restart", "on-failure"),
            ("RestartSec", seconds(service.restart.delay_seconds)),
            ("Slice", SLICE),
        ]),
        ("Install", [("WantedBy", service.wanted_by)]),
    ], f"{service.name}-online: readiness of {service.name} on host {host.name}")


def recovered_targets(service: Service) -> str:
    """The targets to start again once the service is ready (after a crash and restart)."""
    return " ".join(dict.fromkeys((service.wanted_by, "kubernetes.target")))


def target_unit(target: Target, host: HostPlan) -> str:
    """A target wants and requisites the online units of its services and its sub-targets."""
    onlines = [online_unit(s) for s in host.services if s.wanted_by == f"{target.name}.target" and s.readiness]
    plain = [f"{s.name}.service" for s in host.services
             if s.wanted_by == f"{target.name}.target" and s.readiness is None]
    children = [f"{t.name}.target" for t in host.targets if t.wanted_by == f"{target.name}.target"]
    present = {f"{t.name}.target" for t in host.targets}
    after = [name for name in target.after if name in present or not name.endswith("-online.target")]
    required = onlines + plain + children
    loose = {f"{s.name}.service" for s in host.services if not s.holds_target}
    unit: list[tuple[str, str]] = [("Description", target.description)]
    unit += [("Wants", name) for name in required]
    unit += [("Requisite", name) for name in required if name not in loose]
    unit += [("After", name) for name in dict.fromkeys(required + after) if name not in loose]
    return render_unit([
        ("Unit", unit),
        ("Install", [("WantedBy", target.wanted_by)] if target.wanted_by else []),
    ], f"{target.name}.target on host {host.name}: active only when everything it requires is ready")


def path_unit(service: Service) -> str:
    return render_unit([
        ("Unit", [("Description", f"kubesmith: watch {service.name}'s certificates and keys")]),
        ("Path", [*(("PathChanged", path) for path in service.watch_files),
                  ("Unit", f"{service.name}-certs-changed.service")]),
        ("Install", [("WantedBy", f"{service.name}.service")]),
    ])


def restart_unit(service: Service) -> str:
    return render_unit([
        ("Unit", [("Description", f"kubesmith: restart {service.name} after a certificate change"),
                  ("StartLimitIntervalSec", "0")]),
        ("Service", [("Type", "oneshot"),
                     ("ExecStart", f"systemctl try-restart {service.name}.service")]),
    ])


# -- users and directories ---------------------------------------------------------------------

def sysusers(host: HostPlan) -> str:
    """sysusers.d(5): system users and groups for components that do not run as root."""
    lines = [f"# kubesmith: users and groups of host {host.name}"]
    for user in host.users:
        if user.group != user.name:
            lines.append(f"g {user.group} -")
        lines.append(f'u {user.name} - "{user.description}" {user.home} /usr/sbin/nologin')
        if user.group != user.name:
            lines.append(f"m {user.name} {user.group}")
    return "\n".join(lines) + "\n"


def tmpfiles(host: HostPlan) -> str:
    """tmpfiles.d(5): the directories components and kubesmith need, with owners and modes."""
    rows: dict[str, tuple[str, str, str]] = {
        layout.ETC: ("0755", "root", "root"),
        layout.PKI: ("0755", "root", "root"),
        layout.CONFIG: ("0755", "root", "root"),
        layout.KUBESMITH_ETC: ("0755", "root", "root"),
        ENV_DIR: ("0750", "root", "root"),
    }
    for service in host.services:
        for path in writable_paths(service):
            _add_parents(rows, path)
            rows[path] = ("0750", service.user, service.group)
    lines = [f"# kubesmith: directories of host {host.name}"]
    lines += [f"d {path} {mode} {owner} {group} -" for path, (mode, owner, group) in rows.items()]
    return "\n".join(lines) + "\n"


def _add_parents(rows: dict[str, tuple[str, str, str]], path: str) -> None:
    parents = [str(p) for p in PurePosixPath(path).parents if str(p) not in ("/", "/var", "/var/log", "/var/lib", "/run")]
    for parent in reversed(parents):
        rows.setdefault(parent, ("0755", "root", "root"))
