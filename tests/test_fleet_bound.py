"""`spec.ssh.maxParallelHosts` bounds the hosts apply works on at once in its heavy phases, and only there.

Ten hosts, each a loopback address of one real sshd (127.0.0.2-11, reached from documentation addresses
through a ProxyCommand, as a jump host would: a spec's address may not be loopback). The key's
forced command makes every remote command log `start ADDRESS PID` and `end ADDRESS PID` around it (ADDRESS:
the server's side of SSH_CONNECTION, so the host it ran on) and last at least SLOW seconds; so the log
says how many hosts had a command running at any moment. It also puts a stand-in `systemctl` first on
PATH, whose blocking `start kubernetes.target` returns only once every host is in it, as etcd's
quorum needs all members: that phase must not be bounded, or it never ends.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from sshd_fixture import LocalSshd, start_sshd

from kubesmith.backends.apply import HostChanges, HostState, inspect_all, observed_plan, start_in_order
from kubesmith.backends.runtime_bundle import RuntimeBundle
from kubesmith.backends.ssh_settings import ssh_options
from kubesmith.spec.load import load_spec_text
from kubesmith.spec.model import Cluster
from kubesmith.transport.ssh import SshOptions, SshTransport
from kubesmith.versions.registry import load_registry

HOSTS = 10  # more than FLEET_HOSTS: the phases say summary lines
SLOW = 0.5  # seconds every remote command lasts at least
LOOPBACK = [f"127.0.0.{index}" for index in range(2, 2 + HOSTS)]
ADDRESSES = [f"198.51.100.{index}" for index in range(10, 10 + HOSTS)]  # documentation addresses, never dialled
HOST_PYTHON_MINOR = subprocess.run(["/usr/bin/python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                                   capture_output=True, text=True, check=True).stdout.strip()

MARKS = """\
#!/bin/bash
# the key's forced command: marks around the command the client asked for
where=$(echo "$SSH_CONNECTION" | cut -d' ' -f3)
echo "start $where $$" >> {log}
# a barrier, so that concurrency shows whatever this machine's speed: wait (30 s at most) until as many
# hosts as the test wants have begun a command
for _ in $(seq 300); do
    [ "$(grep '^start' {log} | cut -d' ' -f2 | sort -u | wc -l)" -ge "$(cat {wanted})" ] && break
    sleep 0.1
done
sleep {slow}
PATH={bin}:$PATH bash -c "$SSH_ORIGINAL_COMMAND"
status=$?
echo "end $where $$" >> {log}
exit $status
"""

SYSTEMCTL = """\
#!/bin/bash
# a stand-in for systemd: `start --no-block` queues nothing; `start kubernetes.target` waits for every host.
# Why a stand-in: the fault to inject is a start that blocks until all ten hosts are in it, on demand and
# with nothing else to wait for; real systemd runs only inside lab hosts, and ten of them with etcd would
# make the quorum real but cost minutes and leave the wait's length to the machine.
if [ "$1 $2" = "start --no-block" ]; then exit 0; fi
if [ "$1" = "is-active" ]; then shift; for unit; do echo active; done; exit 0; fi
if [ "$1 $2" = "start kubernetes.target" ]; then
    touch {barrier}/$(echo "$SSH_CONNECTION" | cut -d' ' -f3)
    for _ in $(seq 600); do
        [ "$(ls {barrier} | wc -l)" -ge {hosts} ] && exit 0
        sleep 0.1
    done
    echo "only $(ls {barrier} | wc -l) of {hosts} hosts started kubernetes.target within 60 s" >&2
    exit 1
fi
exit 0
"""


@pytest.fixture(scope="module")
def fleet_sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalSshd, Path]]:
    """The sshd, listening on every LOOPBACK address, and the directory of its marks and stand-ins."""
    work = tmp_path_factory.mktemp("fleet")
    (work / "bin").mkdir()
    (work / "barrier").mkdir()
    marks = work / "marks"
    marks.write_text(MARKS.format(bin=work / "bin", log=work / "log", slow=SLOW, wanted=work / "wanted"))
    (work / "wanted").write_text("1")
    marks.chmod(0o755)
    systemctl = work / "bin" / "systemctl"
    systemctl.write_text(SYSTEMCTL.format(barrier=work / "barrier", hosts=HOSTS))
    systemctl.chmod(0o755)
    listen = "".join(f"ListenAddress {address}\n" for address in LOOPBACK)
    with start_sshd(work, f"{listen}MaxStartups 100\n", f'command="{marks}"') as sshd:
        yield sshd, work


def fleet_options(sshd: LocalSshd, work: Path, cluster: Cluster) -> SshOptions:
    """The cluster's SSH options, as apply makes them (`ssh_options`); each documentation address reaches
    the sshd on its own loopback address (a ProxyCommand)."""
    relay = ("import socket; from kubesmith.lab.proxy import relay; "
             "relay(socket.create_connection(('{to}', %p)), 0, 1)")
    config = work / "ssh_config"
    config.write_text("".join(f"Host {address}\n  ProxyCommand {sys.executable} -c \"{relay.format(to=to)}\"\n"
                              for address, to in zip(ADDRESSES, LOOPBACK)))
    known_hosts = work / "known_hosts"
    key = sshd.host_key_pub.read_text().strip()
    known_hosts.write_text("".join(f"[{address}]:{sshd.port} {key}\n" for address in ADDRESSES))
    return ssh_options(cluster, str(config), str(known_hosts), str(sshd.identity))[0]


def fleet_cluster(bound: int, port: int) -> Cluster:
    hosts = [{"name": f"h{index}", "address": address, "roles": ["control-plane", "etcd", "node"] if index == 1
              else ["node"]} for index, address in enumerate(ADDRESSES, 1)]
    return load_spec_text(yaml.safe_dump({
        "apiVersion": "kubesmith.io/v1alpha1", "kind": "Cluster", "metadata": {"name": "fleet"},
        "spec": {"kubernetesVersion": "1.36.2", "hosts": hosts, "ssh": {"port": port, "maxParallelHosts": bound}}}),
        "fleet.yaml").cluster


def most_hosts_at_once(log: str) -> int:
    """The most hosts that had a command running at one moment, from the marks in order."""
    running: dict[str, set[str]] = {}
    most = 0
    for line in log.splitlines():
        mark, where, pid = line.split()
        if mark == "start":
            running.setdefault(where, set()).add(pid)
        else:
            running[where].discard(pid)
        most = max(most, sum(1 for pids in running.values() if pids))
    return most


async def look_and_inspect(options: SshOptions, cluster: Cluster, said: list[str]) -> None:
    """What `apply` and `plan` do first: reach every host, look at each, inspect each."""
    bundle = RuntimeBundle(b"", "0" * 64, (HOST_PYTHON_MINOR,))
    async with SshTransport(options) as transport:
        await transport.reach({host.name: host.address for host in cluster.spec.hosts})
        plan = await observed_plan(transport, cluster, load_registry(), [host.name for host in cluster.spec.hosts])
        # no files: inspect reads and writes nothing of this machine's, yet runs its commands
        states = await inspect_all(transport, plan, {host.name: [] for host in plan.hosts}, bundle,
                                   progress=said.append)
    assert [state.plan.name for state in states] == [f"h{index}" for index in range(1, HOSTS + 1)]


@pytest.mark.parametrize("bound", [3, HOSTS])
def test_looking_at_and_inspecting_hosts_works_on_at_most_max_parallel_hosts_at_once(
        fleet_sshd: tuple[LocalSshd, Path], bound: int) -> None:
    """With 3, never more than 3 hosts have a command running, and 3 do at some moment; with 10, more
    than 3 do: the bound, not the transport or the sshd, is what keeps the others waiting. Each host's
    first command waits until min(bound, 4) hosts have begun one (the marks' barrier), so a transport
    that worked on fewer hosts at once would show it, however fast this machine is."""
    sshd, work = fleet_sshd
    (work / "log").write_text("")
    (work / "wanted").write_text(str(min(bound, 4)))
    said: list[str] = []
    cluster = fleet_cluster(bound, sshd.port)
    options = fleet_options(sshd, work, cluster)
    assert options.max_parallel_hosts == bound
    try:
        asyncio.run(look_and_inspect(options, cluster, said))
    finally:
        (work / "wanted").write_text("1")
    log = (work / "log").read_text()
    assert log.count("start ") == log.count("end ") == HOSTS * 6  # observe, and inspect's five commands per host
    most = most_hosts_at_once(log)
    assert (most == bound) if bound < HOSTS else (most > 3), log
    assert said[-1] == f"inspect {HOSTS}/{HOSTS} hosts"  # many hosts: a summary line, none per host
    assert not any(line.startswith("h") and ": " in line for line in said)


def test_starting_a_target_that_needs_every_host_is_not_bounded(fleet_sshd: tuple[LocalSshd, Path]) -> None:
    """`systemctl start kubernetes.target` returns on each host only once every host has begun it (the
    stand-in's barrier, as etcd needs its quorum): with a bound of 2 it still ends, in well within the
    barrier's 60 s; a bound there would leave 8 hosts waiting for a slot the first 2 never give back."""
    sshd, work = fleet_sshd
    cluster = fleet_cluster(2, sshd.port)
    said: list[str] = []

    async def start() -> None:
        async with SshTransport(fleet_options(sshd, work, cluster)) as transport:
            plan = await observed_plan(transport, cluster, load_registry(), [host.name for host in cluster.spec.hosts])
            states = [HostState(host, (), {}, {}, frozenset(), HostChanges(host.name, (), (), (), (), (), ()))
                      for host in plan.hosts]
            await asyncio.wait_for(start_in_order(transport, states, said.append, 90.0, {}, restart=False), 120)

    asyncio.run(start())
    assert len(list((work / "barrier").iterdir())) == HOSTS
    assert "starting kubernetes.target on 10 hosts" in said  # many hosts: counted, not named
    assert said[-1] == "kubernetes.target active on 10 hosts"


def test_a_host_takes_one_slot_however_many_of_its_steps_run_and_gives_it_back_after_the_last() -> None:
    """One slot: h1's two steps at once (one inside the other, one beside) hold it together, and h2 gets
    it only when h1's last step ends, as a step inside a step must never wait for its own host."""
    order: list[str] = []

    async def scenario() -> None:
        async with SshTransport(SshOptions(max_parallel_hosts=1)) as transport:
            release = asyncio.Event()

            async def h1_step(name: str) -> None:
                async with transport.bounded("h1"):
                    async with transport.bounded("h1"):  # nested: enters at once
                        order.append(f"h1 {name} in")
                        await release.wait()
                    order.append(f"h1 {name} out")

            async def h2_step() -> None:
                async with transport.bounded("h2"):
                    order.append("h2 in")

            first = asyncio.ensure_future(h1_step("a"))
            await asyncio.sleep(0)
            other = asyncio.ensure_future(h2_step())
            second = asyncio.ensure_future(h1_step("b"))
            await asyncio.sleep(0.05)
            assert order == ["h1 a in", "h1 b in"]  # h2 waits; h1's second step does not
            release.set()
            await asyncio.wait_for(asyncio.gather(first, second, other), 5)

    asyncio.run(scenario())
    assert order[-1] == "h2 in" and sorted(order[2:4]) == ["h1 a out", "h1 b out"]
