"""`kubesmith status`: every component on every host, from the operator's machine."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

import click

from kubesmith.cli.common import (Duration, check_host_names, emit_json, fail, hosts_option, load_plan_or_fail,
                                  output_option, require_ssh_files, spec_argument, ssh_flags)
from kubesmith.exitcodes import ExitCode

if TYPE_CHECKING:  # imported where used: `--help` loads none of them
    from kubesmith.health.status import ClusterStatus, HostView
    from kubesmith.vocabulary.model import HostPlan


@click.command("status")
@spec_argument()
@output_option()
@hosts_option()
@click.option("--state-dir", default=None, metavar="DIR",
              help="State directory (credentials for the probes). Default as for `run`.")
@click.option("--timeout", type=Duration(minimum=0.1), default="3s", show_default=True,
              help="Timeout of each probe.")
@ssh_flags()
def status_command(spec_file: str, output: str, hosts: tuple[str, ...], state_dir: str | None,
                   timeout: float, ssh_config: str | None, known_hosts: str | None, identity: str | None) -> None:
    """Every component on every host: running, ready (reason, latency), version, certificate life.

    Also etcd's members and leader; for each node its Node's Ready condition and how many of its
    pods run (asked with the node's own credentials); and each host's certificate agent: when
    it last checked, its last renewal, the next one due and the certificates it could not renew.
    Hosts run by a live `kubesmith run` are probed from here; the others over SSH, where each
    probe runs on the component's own host and systemd says what runs. Exit 0 when every
    component is healthy and every node Ready, 4 otherwise (the agent's report informs; it does
    not change the exit code).
    """
    from kubesmith.backends.ssh_settings import ssh_options
    from kubesmith.health.remote import ssh_view
    from kubesmith.health.status import cluster_status, local_view, ran_here, status_lines
    from kubesmith.pki.store import default_state_dir
    from kubesmith.transport.ssh import SshTransport

    loaded, plan = load_plan_or_fail(spec_file)
    check_host_names(plan, hosts, spec_file)
    state = default_state_dir(Path(spec_file), plan.cluster, state_dir)
    options, _ = ssh_options(loaded.cluster, ssh_config, known_hosts, identity)
    local = {h.name for h in plan.hosts if ran_here(state, h.name)}
    remote = [h for h in plan.hosts if (not hosts or h.name in hosts) and h.name not in local]
    require_ssh_files(options.problem() if remote else None)  # the same for every host: said once, first
    options = dataclasses.replace(options, connect_attempts=1)  # status says how hosts are now: a down host is down

    async def gather() -> ClusterStatus:
        async with SshTransport(options) as transport:
            async def view_for(host: HostPlan) -> HostView:
                if host.name in local:  # a `kubesmith run` host: probed from here, live or stopped
                    return local_view(state, host)
                return await ssh_view(transport, host, timeout)

            return await cluster_status(plan, view_for, list(hosts) or None, timeout=timeout)

    result = asyncio.run(gather())
    if output == "json":
        emit_json(result.to_dict())
    else:
        for line in status_lines(result):
            click.echo(line)
    if not result.healthy:
        bad = [f"{c.host}/{c.service}" for h in result.hosts for c in h.components if not c.ready]
        bad += [f"{h.host}/etcd-cluster" for h in result.hosts if h.etcd_error]
        fail(f"unhealthy: {', '.join(bad) or 'see above'}", ExitCode.UNHEALTHY)
