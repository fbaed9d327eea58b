"""`kubesmith kubeconfig`: a personal, short-lived kubeconfig, and taking it back."""

from __future__ import annotations

import datetime as dt
import getpass
import os
import re
import sys
from pathlib import Path

import click
import yaml

from kubesmith.cli.common import CERTIFICATE_TTL, emit_json, fail, load_plan_or_fail, out_option, output_option, spec_argument
from kubesmith.exitcodes import ExitCode
from kubesmith.pki.store import default_state_dir

NAME = re.compile(r"^[a-z0-9]([-a-z0-9.@_]*[a-z0-9])?$")


class KubeconfigGroup(click.Group):
    """`kubeconfig CLUSTER ...` mints; `kubeconfig revoke CLUSTER NAME` takes back."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["create", *args]
        elif args and args[0].startswith("-") and args[0] not in ("-h", "--help"):
            args = ["create", *args]
        return super().parse_args(ctx, args)


def _user_name(value: str | None) -> str:
    name = (value or getpass.getuser()).lower()
    if not NAME.match(name) or len(name) > 63:
        fail(f"--user {name!r}: a user name is lower-case letters, digits and - . @ _ (at most 63)", ExitCode.USAGE)
    return name


def _server_problem(server: str) -> str | None:
    """Why --server is not https://HOST[:PORT][/PATH] of an API server, or None: kubesmith's requests and the
    person's kubeconfig authenticate with client certificates, which only TLS carries (over http:// whoever
    answers could claim the binding was made), and the URL lands in the kubeconfig as it is."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(server)
        parts.port  # noqa: B018  # raises ValueError for a port out of range
    except ValueError as exc:
        return f"is not a URL ({exc})"
    if parts.scheme.lower() != "https":
        return "must start with https:// (the API authenticates by client certificate, over TLS only)"
    if not parts.hostname:
        return "names no host (https://HOST[:PORT])"
    if "@" in parts.netloc or parts.query or parts.fragment or server.endswith(("?", "#")):
        return "is not https://HOST[:PORT][/PATH] (no user information, query or fragment)"
    if any(c.isspace() or not c.isprintable() for c in server):
        return "holds a space or a control character"
    return None


def _access(spec_file: str, state_dir: str | None, server: str | None):  # type: ignore[no-untyped-def]
    from kubesmith.backends.access import ClusterAccess, server_url

    if server is not None and (problem := _server_problem(server)) is not None:
        fail(f"--server {server!r} {problem}", ExitCode.USAGE)
    loaded, plan = load_plan_or_fail(spec_file)
    state = default_state_dir(Path(spec_file), plan.cluster, state_dir)
    access = ClusterAccess(plan, state, server)
    spec = loaded.cluster.spec
    endpoint_set = spec.control_plane_endpoint is not None or spec.control_plane_vip is not None
    if server is None and not endpoint_set and len(loaded.cluster.control_plane_hosts) > 1:
        port = loaded.cluster.spec.components.apiserver.secure_port
        candidates = [server_url(host.address, port) for host in loaded.cluster.control_plane_hosts]
        ready = access.first_ready(candidates)
        if ready is None:
            fail(f"no control-plane host answers /readyz ({', '.join(candidates)})", ExitCode.FAILED)
        click.echo(f"note: no spec.controlPlaneEndpoint or controlPlaneVIP: using {ready}, the first ready "
                   "control-plane host; "
                   "the kubeconfig fails over to no other", err=True)
        access = ClusterAccess(plan, state, ready)
    return access


def _merge_target() -> Path:
    """The kubeconfig --merge adds to: $KUBECONFIG's first file (as kubectl's `config` commands), else
    ~/.kube/config; a $KUBECONFIG that names no file is a usage error."""
    variable = os.environ.get("KUBECONFIG")
    if variable is not None and variable.strip():
        first = next((part for part in variable.split(os.pathsep) if part.strip()), "")
        if not first:
            fail(f"$KUBECONFIG {variable!r} names no file: give a path, or unset it for ~/.kube/config",
                 ExitCode.USAGE)
        return Path(first).expanduser()
    home = os.environ.get("HOME")
    if home is not None and not home.strip():  # ~ would be /: the kubeconfig would land in /.kube
        fail(f"$HOME {home!r} is empty, so ~/.kube/config names no home: set $HOME, or name the file with "
             "$KUBECONFIG", ExitCode.USAGE)
    return Path("~/.kube/config").expanduser()


@click.group(cls=KubeconfigGroup, invoke_without_command=False)
def kubeconfig() -> None:
    """Personal kubeconfigs: `kubeconfig CLUSTER [--user NAME] ...`, `kubeconfig revoke CLUSTER NAME`.

    A person gets a fresh key and a short-lived client certificate (CN = their name, group
    kubesmith:user:<name>), and one ClusterRoleBinding ties that group to a role. Revoking
    deletes the binding: the next request is refused though the certificate has not expired.
    The root-only super-admin.conf on control-plane hosts stays the break-glass credential.

    \b
    Examples:
      kubesmith kubeconfig cluster.yaml --user alice --ttl 8h --out alice.conf
      kubesmith kubeconfig cluster.yaml --role view --merge      # into ~/.kube/config
      kubesmith kubeconfig revoke cluster.yaml alice
    """


@kubeconfig.command("create")
@spec_argument()
@click.option("--user", "user", default=None, metavar="NAME", help="The person (default: your login name).")
@click.option("--role", type=click.Choice(["view", "edit", "admin", "cluster-admin"]), default="cluster-admin",
              show_default=True, help="The ClusterRole bound to the person's group.")
@click.option("--ttl", type=CERTIFICATE_TTL, default="8h", show_default=True, help="Life of the certificate.")
@out_option("Write the kubeconfig here (0600); default: standard output.")
@output_option("yaml", "json", help_text="The kubeconfig's format (kubectl reads both).")
@click.option("--merge", is_flag=True, help="Add cluster, user and context to ~/.kube/config ($KUBECONFIG's first "
                                            "file), keeping its other entries, and switch to the new context.")
@click.option("--server", default=None, metavar="URL", help="API URL to put in the kubeconfig (default: the "
                                                            "cluster's endpoint).")
@click.option("--state-dir", default=None, metavar="DIR", help="The cluster's state directory (its CA).")
def create(spec_file: str, user: str | None, role: str, ttl: float, out_file: str | None, output: str, merge: bool,
           server: str | None, state_dir: str | None) -> None:
    """Mint a kubeconfig for one person, bound to a role until revoked or expired."""
    from kubesmith.apiclient import ApiError
    from kubesmith.backends.access import BadKubeconfig, existing_kubeconfig, merge_into, write_kubeconfig
    from kubesmith.fsutil import out_file_problem

    if out_file and merge:
        fail("--out and --merge exclude each other", ExitCode.USAGE)
    if output != "yaml" and merge:
        fail("--merge writes the kubeconfig's own format; leave out -o/--output", ExitCode.USAGE)
    name = _user_name(user)
    # where it goes is checked before anything is granted: a failed write would leave a binding behind
    if out_file and (problem := out_file_problem(Path(out_file))) is not None:
        fail(f"--out {out_file!r}: {problem} (leave --out out to write to standard output)", ExitCode.USAGE)
    existing = None
    if merge:
        target = _merge_target()
        try:
            existing = existing_kubeconfig(target)
        except BadKubeconfig as exc:
            fail(f"--merge: {exc}; fix or move it, or write a new one with --out FILE", ExitCode.IO_ERROR)
    try:
        grant = _access(spec_file, state_dir, server).grant(name, role, dt.timedelta(seconds=ttl))
    except ApiError as exc:
        fail(str(exc), ExitCode.FAILED)
    expires = grant.not_after.strftime("%Y-%m-%d %H:%M UTC")
    if merge:
        merge_into(target, grant.kubeconfig, existing)
        destination = f"{target} (context {grant.kubeconfig['current-context']})"
    elif out_file:
        write_kubeconfig(Path(out_file), grant.kubeconfig, as_json=output == "json")
        destination = out_file
    else:
        if output == "json":
            emit_json(grant.kubeconfig)
        else:
            sys.stdout.write(yaml.safe_dump(grant.kubeconfig, sort_keys=False))
        destination = "standard output"
    click.echo(f"kubeconfig for {name} ({role}, group kubesmith:user:{name}) at {grant.server}, valid until "
               f"{expires}: {destination}", err=True)


@kubeconfig.command("revoke")
@spec_argument()
@click.argument("name")
@click.option("--state-dir", default=None, metavar="DIR", help="The cluster's state directory (its CA).")
@click.option("--server", default=None, metavar="URL", help="API URL (default: the cluster's endpoint).")
@output_option()
def revoke(spec_file: str, name: str, state_dir: str | None, server: str | None, output: str) -> None:
    """Take a person's access back: delete their binding (their certificate then opens nothing)."""
    from kubesmith.apiclient import ApiError

    user = _user_name(name)
    try:
        existed = _access(spec_file, state_dir, server).revoke(user)
    except ApiError as exc:
        fail(str(exc), ExitCode.FAILED)
    if output == "json":
        emit_json({"user": user, "revoked": existed})
    else:
        click.echo(f"{user}: access revoked" if existed else f"{user}: had no access to revoke")
