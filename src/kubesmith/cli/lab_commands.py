"""`kubesmith lab`: local hosts (systemd-nspawn, real systemd + sshd) to try kubesmith on."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

import click

from kubesmith.cli.common import emit_json, fail, output_option
from kubesmith.exitcodes import ExitCode
from kubesmith.lab import access, lifecycle, rootfs
from kubesmith.lab.config import LabConfig
from kubesmith.lab.errors import LabError, NoLab

F = TypeVar("F", bound=Callable[..., Any])


def progress(message: str) -> None:
    """Progress goes to stderr, so stdout stays clean for command output."""
    click.echo(f"lab: {message}", err=True)


def lab_errors(function: F) -> F:
    """Turn LabError into one `error:` line and a non-zero exit, never a traceback."""

    @wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except LabError as exc:  # LabNotPossible too: not root, a tool missing (names the apt package)
            fail(str(exc), ExitCode.FAILED)
        except subprocess.TimeoutExpired as exc:
            fail(f"timed out: {' '.join(map(str, exc.cmd))}", ExitCode.FAILED)

    return wrapper  # type: ignore[return-value]


@click.group()
def lab() -> None:
    """Local hosts h1..hN to try kubesmith on: systemd-nspawn containers booting real systemd
    and sshd, each with its own address (10.213.0.11, .12, ...) on a bridge (10.213.0.1)
    inside a private network namespace, linked to this machine's (it is 10.213.0.254 there). Needs root, systemd-nspawn (apt: systemd-container)
    and mmdebstrap; the machine itself need not run systemd.

    \b
    Where things live (environment variables override):
      KUBESMITH_LAB_STATE   state dir: ssh_config, known_hosts, keys, hosts/  [/var/lib/kubesmith/lab]
      KUBESMITH_LAB_CACHE   cached Debian image (built once, ~30-60 s; one    [/var/cache/kubesmith/lab]
                            per `up --suite`, in suites/<suite>)
      KUBESMITH_LAB_NETNS   network namespace name                            [kubesmith-lab]
      KUBESMITH_LAB_BOOT_TIMEOUT  seconds to wait for hosts to boot           [120]
      KUBESMITH_LAB_NSPAWN_ARGS   extra systemd-nspawn arguments, e.g. --bind-ro=/src:/opt/src

    \b
    From any program:  ssh -F $KUBESMITH_LAB_STATE/ssh_config h1
    """


@lab.command()
@click.argument("count", type=click.IntRange(1, 200), metavar="N")
@click.option("--link/--no-link", default=True, show_default=True,
              help="Reach the hosts from this machine's own network namespace (a veth pair into the lab's "
                   "bridge; this machine is 10.213.0.254 there). Without it, run clients under "
                   "`ip netns exec kubesmith-lab`.")
@click.option("--suite", metavar="CODENAME", default=None,
              help="Boot the hosts from another Debian release than this machine's, e.g. `--suite trixie` "
                   "(python3 3.13, containerd 1.7): its image is built once from this machine's mirrors "
                   "(the suite renamed in /etc/apt's sources) and cached beside the default one. "
                   "[default: this machine's own suite]")
@lab_errors
def up(count: int, link: bool, suite: str | None) -> None:
    """Boot N hosts h1..hN and wait until systemd runs in each (builds the image first if needed).

    With the link (the default) kubectl, curl and kubesmith reach 10.213.0.11, .12, ... directly, as
    kind's port mapping does for kind. `lab down` removes it and leaves an unreachable route for
    10.213.0.0/24, so a client never sends the lab's addresses to the default route, off the machine.
    """
    config = dataclasses.replace(LabConfig.from_env(), link=link, suite=rootfs.chosen_suite(suite))
    for lab_host in lifecycle.up(config, count, progress):
        click.echo(f"{lab_host.name} {lab_host.address}")


@lab.command()
@lab_errors
def down() -> None:
    """Power every host off and remove every mount, cgroup, namespace and process of the lab.

    Safe to run again, and after a failed or interrupted `up`.
    """
    lifecycle.down(LabConfig.from_env(), progress)


@lab.command()
@output_option()
@lab_errors
def status(output: str) -> None:
    """Each host with its address, systemd state and PID 1 (as seen from this machine). Exit 4 when
    a host is not running, or no lab is up (as `kubesmith status` when nothing runs)."""
    config = LabConfig.from_env()
    try:
        rows = access.status(config)
    except NoLab as exc:
        fail(str(exc), ExitCode.UNHEALTHY)
    if output == "json":
        emit_json([{"name": row.name, "address": row.address, "state": row.state, "pid": row.leader_pid}
                   for row in rows])
    else:
        for row in rows:
            click.echo(f"{row.name:<6} {row.address:<15} {row.state:<12} pid {row.leader_pid or '-'}")
    if any(row.state not in ("running", "degraded") for row in rows):
        sys.exit(ExitCode.UNHEALTHY)


@lab.command(context_settings={"ignore_unknown_options": True})
@click.argument("host", metavar="H")
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="[CMD]...")
@lab_errors
def ssh(host: str, command: tuple[str, ...]) -> None:
    """Real ssh to host H with the lab's ssh_config (key auth, strict host-key checking)."""
    argv = access.ssh_argv(LabConfig.from_env(), host, list(command))
    sys.exit(subprocess.run(argv, check=False).returncode)


@lab.command(name="exec", context_settings={"ignore_unknown_options": True})
@click.argument("host", metavar="H")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED, metavar="CMD...")
@lab_errors
def exec_(host: str, command: tuple[str, ...]) -> None:
    """Run CMD inside host H without ssh (nsenter into the namespaces of its PID 1)."""
    argv = access.exec_argv(LabConfig.from_env(), host, list(command))
    sys.exit(subprocess.run(argv, check=False).returncode)


@lab.command()
@click.argument("host", metavar="H")
@lab_errors
def reboot(host: str) -> None:
    """Reboot host H from inside (systemctl reboot) and wait until the new boot is running."""
    access.reboot(LabConfig.from_env(), host, progress)
