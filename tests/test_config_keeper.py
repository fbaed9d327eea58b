"""The configuration keeper with the real kube-scheduler v1.36.2: a good configuration graduates,
a bad one crash-loops for real and is rolled back to last-known-good, and one that fails
validation is never started. systemd cannot run here, so `Processes` restarts the real binary
as `Restart=always` would (counting restarts as NRestarts does)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kubesmith.agent.checkpoints import CheckpointStore, ComponentConfig, snapshot
from kubesmith.agent.configloop import Component, Keeper
from kubesmith.agent.validate import validate
from kubesmith.health.wait import LocalProbeRunner
from k8s_support import UNREACHABLE_KUBECONFIG, real_binaries
from plan_support import registry

GOOD = "profiles: [{schedulerName: default-scheduler}]\n"
BAD = "profiles: [{schedulerName: default-scheduler, plugins: {score: {enabled: [{name: NoSuchPlugin}]}}}]\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Processes:
    """A supervisor stand-in for systemd (which must not boot on this machine): starts the real
    binary, restarts it when it exited (counting, as NRestarts), and on request. It remembers the
    configuration each start read, so a test can tell what ever ran."""

    def __init__(self, executable: Path, config: ComponentConfig, document: Path, log: Path) -> None:
        self.executable, self.config, self.document, self.log = executable, config, document, log
        self.count = 0
        self.started: list[str] = []
        self.process: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        self.started.append(hashlib.sha256(self.document.read_bytes()).hexdigest())
        with self.log.open("ab") as log:
            self.process = subprocess.Popen([str(self.executable), *self.config.argv], stdout=log, stderr=log,
                                            stdin=subprocess.DEVNULL)

    def restarts(self, name: str) -> int:
        if self.process is not None and self.process.poll() is not None:
            self.count += 1
            self.start()
        return self.count

    def restart(self, name: str) -> None:
        self.stop()
        self.start()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _setup(tmp_path: Path, validated: bool) -> tuple[Keeper, Processes, Path, str]:
    kubeconfig = tmp_path / "scheduler.conf"
    kubeconfig.write_text(UNREACHABLE_KUBECONFIG)
    document = tmp_path / "scheduler.yaml"
    header = ("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
              f"clientConnection: {{kubeconfig: {kubeconfig}}}\n")
    document.write_text(header + GOOD)
    port = free_port()
    config = ComponentConfig("kube-scheduler", (f"--config={document}", "--bind-address=127.0.0.1",
                                                f"--secure-port={port}", "--profiling=false"),
                             (str(document), str(kubeconfig)))
    component = Component(config, "kube-scheduler", f"tcp://127.0.0.1:{port}")
    executable = real_binaries() / "kube-scheduler"
    processes = Processes(executable, config, document, tmp_path / "scheduler.log")
    validator = (lambda c: validate(c.config, c.binary, executable, "1.36", registry(), timeout=60)) \
        if validated else None
    keeper = Keeper((component,), CheckpointStore(tmp_path / "store"), Path("/"), {"kube-scheduler": 3.0},
                    processes, LocalProbeRunner(), str(tmp_path), validator)
    return keeper, processes, document, header


async def _ready(keeper: Keeper) -> bool:
    for _ in range(240):
        if (await keeper.sample(keeper.components[0])).ready:
            return True
        await asyncio.sleep(0.25)
    return False


async def _until(keeper: Keeper, phase: str, deadline: float) -> None:
    if phase == "good":  # a loaded machine may start the binary slower than a short trial: wait for it first
        assert await _ready(keeper)
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        await keeper.pass_once()
        active = keeper.store.records("kube-scheduler").active
        if active is not None and active.phase == phase:
            return
        await asyncio.sleep(0.25)
    raise AssertionError(f"not {phase} in {deadline}s: {keeper.store.records('kube-scheduler')}")


def config_wait(keeper: Keeper, tmp_path: Path, since: float, timeout: float = 0) -> tuple[int, dict[str, Any]]:
    """`kubesmith config wait` as apply runs it on a host, on this keeper's components and records."""
    components = tmp_path / "components.json"
    components.write_text(json.dumps({"minor": "1.36", "components": [c.document() for c in keeper.components]}))
    done = subprocess.run(["kubesmith", "config", "wait", "kube-scheduler", "--output", "json", "--since", str(since),
                           "--timeout", str(timeout), "--components-file", str(components),
                           "--checkpoints-dir", str(keeper.store.base)], capture_output=True, text=True, timeout=120)
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout)["components"][0]


def test_a_crash_looping_configuration_is_rolled_back_to_last_known_good(tmp_path: Path) -> None:
    keeper, processes, document, header = _setup(tmp_path, validated=False)
    try:
        asyncio.run(_until(keeper, "good", 60))
        good = keeper.store.records("kube-scheduler").active
        assert good is not None and keeper.store.records("kube-scheduler").last_known_good is not None
        code, verdict = config_wait(keeper, tmp_path, time.time())  # unchanged: passes at once
        assert (code, verdict["passed"], verdict["hash"]) == (0, True, good.hash), verdict
        since = time.time()
        document.write_text(header + BAD)  # a change the scheduler accepts on load, and dies of at start
        code, verdict = config_wait(keeper, tmp_path, since)  # the keeper has not looked yet: no verdict
        assert (code, verdict["decided"]) == (4, False), verdict
        processes.restart("kube-scheduler")  # as apply restarts a unit whose files changed
        asyncio.run(_until(keeper, "rolled-back", 60))
        records = keeper.store.records("kube-scheduler")
        assert records.active is not None and records.active.hash == good.hash
        assert records.assigned is not None and records.active.failed == records.assigned.hash != good.hash
        assert processes.count >= 1, "the bad configuration never crashed: the test proves nothing"
        # how the crash loop shows depends on when the keeper looked (the old process may answer once)
        assert any(sign in records.active.reason for sign in ("exited", "did not become ready", "then not ready")), \
            records.active.reason
        assert snapshot(keeper.components[0].config, Path("/")).hash == good.hash and GOOD in document.read_text()
        message = keeper.conditions()["kube-scheduler"]["message"]
        assert message == (f"using last-known-good config {good.hash[:12]}: assigned config "
                           f"{records.assigned.hash[:12]} failed its trial")
        assert asyncio.run(_ready(keeper)), (tmp_path / "scheduler.log").read_text()[-2000:]  # back, and serving
        code, verdict = config_wait(keeper, tmp_path, since)  # what apply's roll-out reads on the host
        assert code == 4 and verdict["passed"] is False and verdict["hash"] == records.assigned.hash, verdict
        assert verdict["running"] == good.hash and verdict["reason"] == records.active.reason, verdict
        code, verdict = config_wait(keeper, tmp_path, time.time())  # an older failure is not this roll-out's:
        assert (code, verdict["passed"], verdict["hash"]) == (0, True, good.hash), verdict  # it runs good again
    finally:
        processes.stop()


class Unsupervised:
    """Nothing restarts these components: their probes are listening sockets the test opens and closes.
    It counts the keeper's looks at each (one NRestarts read a look)."""

    def __init__(self) -> None:
        self.looks: dict[str, int] = {}

    def restarts(self, name: str) -> int:
        self.looks[name] = self.looks.get(name, 0) + 1
        return 0

    def restart(self, name: str) -> None:
        pass


@dataclass
class Pair:
    """The API server and the scheduler, listening sockets for probes, on a clock the test moves one
    second a pass: what is under test is the keeper's pass, not a binary."""

    keeper: Keeper
    host: Unsupervised
    documents: dict[str, Path]
    listeners: dict[str, socket.socket]
    ports: dict[str, int]
    now: list[float]

    def passes(self, seconds: int) -> None:
        for _ in range(seconds):
            asyncio.run(self.keeper.pass_once())
            self.now[0] += 1

    def stop_answering(self) -> None:
        for listener in self.listeners.values():
            listener.close()

    def answer_again(self) -> None:
        self.listeners = {name: socket.create_server(("127.0.0.1", port)) for name, port in self.ports.items()}

    def phases(self) -> dict[str, str]:
        return {name: self.keeper.store.records(name).active.phase  # type: ignore[union-attr]
                for name in self.ports}


@contextmanager
def api_server_and_scheduler(tmp_path: Path, after: tuple[str, ...]) -> Iterator[Pair]:
    """Both components on 5 s trials; the scheduler starts after `after`."""
    listeners = {name: socket.create_server(("127.0.0.1", 0)) for name in ("kube-apiserver", "kube-scheduler")}
    tmp_path.mkdir()
    components, documents = [], {}
    for name, listener in listeners.items():
        documents[name] = tmp_path / f"{name}.yaml"
        documents[name].write_text(f"{name}: on trial\n")
        config = ComponentConfig(name, ("--config", str(documents[name])), (str(documents[name]),))
        components.append(Component(config, name, f"tcp://127.0.0.1:{listener.getsockname()[1]}",
                                    after=after if name == "kube-scheduler" else ()))
    now = [1_000_000.0]
    host = Unsupervised()
    keeper = Keeper(tuple(components), CheckpointStore(tmp_path / "store"), Path("/"),
                    dict.fromkeys(listeners, 5.0), host, LocalProbeRunner(), str(tmp_path), clock=lambda: now[0])
    pair = Pair(keeper, host, documents, listeners, {name: s.getsockname()[1] for name, s in listeners.items()}, now)
    try:
        yield pair
    finally:
        pair.stop_answering()


def _outage_verdicts(tmp_path: Path, after: tuple[str, ...]) -> dict[str, str]:
    """Both components come up, then both stop answering for 10 s (as a leading scheduler exits when
    its API server goes away), then both answer again: each one's phase."""
    with api_server_and_scheduler(tmp_path, after) as pair:
        pair.passes(3)
        pair.stop_answering()
        pair.passes(10)
        pair.answer_again()
        pair.passes(10)
        return pair.phases()


def test_a_component_is_not_judged_while_one_it_starts_after_is_not_ready(tmp_path: Path) -> None:
    """The scheduler starts after the API server: its 10 s outage beside the API server's is not held
    against its configuration, which graduates once it is back; without that order it fails with it."""
    assert _outage_verdicts(tmp_path / "after", ("kube-apiserver",)) == {"kube-apiserver": "failed",
                                                                        "kube-scheduler": "good"}
    assert _outage_verdicts(tmp_path / "alone", ()) == {"kube-apiserver": "failed", "kube-scheduler": "failed"}


def test_only_a_trial_and_what_it_starts_after_are_looked_at(tmp_path: Path) -> None:
    """Once both trials are over the keeper looks at neither component (a look is a `systemctl` and a
    probe, every pass, forever); a new scheduler configuration puts the scheduler on trial, and the
    keeper looks at it and at the API server it starts after, and only until the trial is over."""
    with api_server_and_scheduler(tmp_path / "pair", ("kube-apiserver",)) as pair:
        pair.passes(12)
        assert pair.phases() == {"kube-apiserver": "good", "kube-scheduler": "good"}
        pair.host.looks.clear()
        pair.passes(5)
        assert pair.host.looks == {}
        pair.documents["kube-scheduler"].write_text("kube-scheduler: changed\n")
        pair.passes(3)
        assert pair.host.looks == {"kube-scheduler": 2, "kube-apiserver": 2}  # not in the pass that found it
        pair.stop_answering()  # longer than a drop a trial forgives: the API server's excuses the scheduler's
        pair.passes(8)
        pair.answer_again()
        pair.passes(12)
        assert pair.phases() == {"kube-apiserver": "good", "kube-scheduler": "good"}
        pair.host.looks.clear()
        pair.passes(5)
        assert pair.host.looks == {}


def test_a_configuration_that_fails_validation_is_never_started(tmp_path: Path) -> None:
    keeper, processes, document, header = _setup(tmp_path, validated=True)
    try:
        asyncio.run(_until(keeper, "good", 60))
        good = keeper.store.records("kube-scheduler").active
        assert good is not None
        document.write_text(header + BAD)  # on disk; the unit is not restarted until the keeper says so
        bad = hashlib.sha256(document.read_bytes()).hexdigest()
        outcomes = asyncio.run(keeper.pass_once())
        decision = outcomes["kube-scheduler"].decision
        assert decision.action == "rollback"
        assert decision.reason.startswith("it is not valid: kube-scheduler refuses its configuration: ")
        assert 'ScorePlugin "NoSuchPlugin" does not exist' in decision.reason
        records = keeper.store.records("kube-scheduler")
        assert records.active is not None and (records.active.phase, records.active.hash) == ("rolled-back", good.hash)
        assert bad not in processes.started and GOOD in document.read_text()
    finally:
        processes.stop()


class DryLoadKiller(threading.Thread):
    """SIGTERMs this process's first child running a dry load (`--write-config-to`), as systemd
    signals the agent's cgroup when an apply restarts the agent mid-validation. The scheduler's load
    lasts 35-60 ms here: this reads only this process's children (`/proc/self/task/*/children`),
    every millisecond, to see it in time."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.killed: list[int] = []
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set() and not self.killed:
            for child in self.children():
                try:
                    argv = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
                except OSError:
                    continue
                if any(argument.startswith(b"--write-config-to") for argument in argv):
                    os.kill(child, signal.SIGTERM)
                    self.killed.append(child)
                    break
            time.sleep(0.001)

    @staticmethod
    def children() -> list[int]:
        found = []
        for listing in Path("/proc/self/task").glob("*/children"):
            try:
                found += [int(pid) for pid in listing.read_text().split()]
            except OSError:
                continue
        return found


def test_a_validation_cut_short_is_done_again_by_the_next_agent(tmp_path: Path) -> None:
    """An apply that restarts the agent while it validates a new configuration kills the dry load.
    That says nothing about the configuration, and the trial must not decide without it: a kubelet
    configuration with a misspelt field, which the kubelet runs, once graduated that way. The record
    says the validation is owed; the next agent does it and rolls the configuration back."""
    keeper, processes, document, header = _setup(tmp_path, validated=True)
    try:
        asyncio.run(_until(keeper, "good", 60))
        good = keeper.store.records("kube-scheduler").active
        assert good is not None
        document.write_text(header + BAD)  # not restarted: the running scheduler stays ready on GOOD
        killer = DryLoadKiller()
        killer.start()
        try:
            outcome = asyncio.run(keeper.pass_once())["kube-scheduler"]
        finally:
            killer.done.set()
            killer.join()
        assert killer.killed, "no dry load was seen to kill: the test proves nothing"
        assert outcome.began and outcome.decision.action == "keep", outcome
        records = keeper.store.records("kube-scheduler")
        assert records.active is not None and (records.active.phase, records.active.validated) == ("trial", False)
        restarted = replace(keeper, watches={})  # the next agent: the same records, nothing in memory
        decision = asyncio.run(restarted.pass_once())["kube-scheduler"].decision
        assert decision.action == "rollback" and 'ScorePlugin "NoSuchPlugin" does not exist' in decision.reason
        records = keeper.store.records("kube-scheduler")
        assert records.active is not None and (records.active.phase, records.active.hash) == ("rolled-back", good.hash)
        assert GOOD in document.read_text()
    finally:
        processes.stop()


def test_every_kept_component_of_a_rendered_host_is_described_for_the_agent(tmp_path: Path) -> None:
    """render writes the keeper's components file from the plan: the components with a trial, their
    configuration's files (all in the rendered tree), binary, probe and executable; the keeper is
    off unless the spec asks, and `kubesmith agent` takes the new settings."""
    import json

    from kubesmith.agent.configloop import keeper_for, load_components
    from kubesmith.agent.renewal import AgentConfig
    from kubesmith.backends.render import render
    from plan_support import plan_of_text

    text = ("apiVersion: kubesmith.io/v1alpha1\nkind: Cluster\nmetadata: {name: demo}\nspec:\n"
            "  kubernetesVersion: \"1.36.2\"\n  hosts:\n    - {name: h1, address: 10.0.0.11, "
            "roles: [control-plane, etcd, node]}\n")
    plan = plan_of_text(text)
    render(plan, tmp_path / "state", tmp_path / "out")
    tree = tmp_path / "out" / "h1"
    minor, components = load_components(tree / "etc/kubesmith/components.json")
    assert minor == "1.36"
    assert [c.config.name for c in components] == ["etcd", "kube-apiserver", "kube-controller-manager",
                                                   "kube-scheduler", "containerd", "kubelet", "kube-proxy"]
    for component in components:
        assert all((tree / path.lstrip("/")).is_file() for path in component.config.paths), component
    assert {c.config.name: c.after for c in components} == {
        "etcd": (), "kube-apiserver": ("etcd",), "kube-controller-manager": ("kube-apiserver",),
        "kube-scheduler": ("kube-apiserver",), "containerd": (), "kubelet": ("containerd", "kube-apiserver"),
        "kube-proxy": ("kubelet",)}
    kubelet = next(c for c in components if c.config.name == "kubelet")
    assert (kubelet.binary, kubelet.executable) == ("kubelet", "/usr/local/bin/kubelet")
    assert kubelet.probe == "http://127.0.0.1:10248/healthz"
    assert next(c for c in components if c.config.name == "containerd").binary == "containerd"
    settings = json.loads((tree / "etc/kubesmith/agent.json").read_text())
    assert settings["keep_configs"] is False
    config = AgentConfig(host="h1", pki_dir=tmp_path, kubeconfig_dir=tmp_path, state_file=tmp_path / "s.json",
                         keep_configs=settings["keep_configs"])
    assert keeper_for(config) is None
