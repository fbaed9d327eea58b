"""etcd: the cluster's key-value store, one member per host with the `etcd` role.

Client and peer traffic are mutual TLS with certificates from `etcd-ca`; metrics stay on loopback.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field

from kubesmith import layout
from kubesmith.durations import go_duration_problem
from kubesmith.modules.base import PKI, Managed, Module, NoOption, OptionProblem, Trial, render_flags, system_user
from kubesmith.pki.certlist import authority, certificate
from kubesmith.vocabulary.facts import Contribution, HostContext
from kubesmith.vocabulary.model import Probe, RestartPolicy, Service
from kubesmith.vocabulary.types import AbsolutePath, ExtraArgs, Port, SnapshotInterval, StrictModel, go_int
from kubesmith.urls import url_host


def _retention(value: str) -> str:
    """etcd's --auto-compaction-retention: a whole number (hours in periodic mode, revisions in revision
    mode; which one the mode decides, in EtcdModule.check) or a Go duration (periodic mode only)."""
    if re.fullmatch(r"[0-9]{1,19}", value):
        return value
    if problem := go_duration_problem(value):
        raise ValueError(f"etcd reads it as a whole number (hours, or revisions in revision mode) or a Go "
                         f"duration: {problem}")
    return value


# etcd reads a whole-number retention with strconv.Atoi and, in periodic mode, multiplies it by an hour
# into a time.Duration (int64 nanoseconds), which overflows past Go's longest duration (2562047h). In
# revision mode it is a count of revisions (busy clusters keep 1,000,000 and more): any int64.
MAX_RETENTION_HOURS = 2_562_047
MAX_RETENTION_REVISIONS = (1 << 63) - 1


Retention = Annotated[str, AfterValidator(_retention)]


class EtcdSnapshotOptions(StrictModel):
    interval: SnapshotInterval | None = Field(default=None,
                                 description="Take a snapshot on every member this often (e.g. 12h; the first at "
                                             "once); off when unset. The kubesmith agent takes them.")
    keep: int = Field(default=5, ge=1, le=1000, description="Snapshots each member keeps; older ones are deleted.")
    directory: AbsolutePath = Field(default="/var/backups/kubesmith/etcd",
                                    description="Where each member keeps its snapshots (0700, files 0600); "
                                                "`kubesmith reset` leaves it.")


class EtcdOptions(StrictModel):
    data_dir: AbsolutePath = Field(default=f"{layout.LIB}/etcd", description="Directory holding the member's data.")
    client_port: Port = Field(default=2379, description="Port for client traffic (the API server, probes).")
    peer_port: Port = Field(default=2380, description="Port for member-to-member traffic.")
    metrics_port: Port = Field(default=2381, description="Plain-HTTP metrics and health port, on 127.0.0.1 only.")
    heartbeat_interval: int = Field(default=100, ge=10, description="Raft heartbeat interval in milliseconds.")
    election_timeout: int = Field(default=1000, ge=100, description="Raft election timeout in milliseconds.")
    snapshot_count: int = Field(default=10000, ge=1, description="Committed transactions that trigger a snapshot.")
    # etcd answers every write with "mvcc: database space exceeded" (a NOSPACE alarm) once its database file
    # reaches the quota (etcd 3.5.1 with 1 byte: at once); a small cluster's database is several MiB and grows
    # with history between compactions, so below 64 MiB the API server soon cannot write
    quota_backend_bytes: int | None = Field(default=None, ge=64 << 20,
                                            description="Backend size quota in bytes, at least 64 MiB (67108864): "
                                            "etcd refuses every write past it; default: etcd's (2 GiB).")
    auto_compaction_mode: Literal["periodic", "revision"] = Field(
        default="periodic", description="How autoCompactionRetention counts: periodic (time) or revision (the "
        "number of revisions kept).")
    auto_compaction_retention: Retention = Field(default="8", description="History kept by auto-compaction: "
                                                 "hours (8) or a Go duration (30m) in periodic mode, a number of "
                                                 "revisions (1000000) in revision mode.")
    log_level: str = Field(default="info", pattern="^(debug|info|warn|error|panic|fatal)$",
                           description="etcd log level.")
    extra_args: ExtraArgs = Field(default={}, description="Additional etcd flags; not the flags kubesmith sets itself.")
    snapshots: EtcdSnapshotOptions = Field(default_factory=EtcdSnapshotOptions,
                                           description="Periodic snapshots on each member (`kubesmith etcd restore` "
                                                       "takes any of them).")


# etcd limits whose zero stops every write the API server makes: a Txn of one operation is "too many
# operations in txn request" under --max-txn-ops 0, and every request is "request is too large" under
# --max-request-bytes 0 (etcd starts with either and refuses each write)
_ZERO_STOPS_WRITES = {"max-txn-ops": "every transaction the API server sends (one compare, one put) is refused as "
                                     "too many operations",
                      "max-request-bytes": "every request the API server sends is refused as too large"}


def _zero_limit_problems(options: EtcdOptions) -> list[OptionProblem]:
    problems = []
    for flag, why in _ZERO_STOPS_WRITES.items():
        value = options.extra_args.get(flag)
        if value is not None and not isinstance(value, bool) and go_int(str(value), "uint") == 0:
            problems.append(OptionProblem(("extraArgs", flag), f"--{flag} 0: {why}, so no object could be created "
                                          "or changed; leave it out for etcd's default"))
    return problems


def _retention_problems(options: EtcdOptions) -> list[OptionProblem]:
    """autoCompactionRetention as etcd reads it in the mode autoCompactionMode names."""
    value, where = options.auto_compaction_retention, ("autoCompactionRetention",)
    if options.auto_compaction_mode == "revision":
        if not value.isdigit():
            return [OptionProblem(where, f"{value!r}: in revision mode etcd keeps a number of revisions, such as "
                                  "1000000, not a duration")]
        if int(value) > MAX_RETENTION_REVISIONS:
            return [OptionProblem(where, f"{value} revisions is more than etcd can count (a 64-bit integer)")]
        return []
    if value.isdigit() and int(value) > MAX_RETENTION_HOURS:
        return [OptionProblem(where, f"{value} hours is longer than Go's longest duration ({MAX_RETENTION_HOURS}h), "
                              "which etcd's periodic mode reads it as; for a number of revisions, set "
                              "autoCompactionMode: revision")]
    return []


def local_etcdctl(bin_dir: str, client_port: int) -> list[str]:
    """etcdctl on a member itself, against its loopback listener, with its health-check client (who
    runs it adds the timeouts its work needs): `etcd snapshot`, restore, membership, the agent's snapshots."""
    client = certificate("etcd-healthcheck-client")
    return [f"{bin_dir}/etcdctl", f"--endpoints=https://127.0.0.1:{client_port}",
            f"--cacert={layout.pki_path(authority('etcd-ca').cert_file)}", f"--cert={client.cert_path}",
            f"--key={client.key_path}"]


MAX_ELECTION_MS = 50000  # etcd's maxElectionMs (server/embed/config.go)

_BOOTSTRAP = "the hosts with the etcd role (spec.hosts), as --initial-cluster"
_FORCE_NEW_CLUSTER = NoOption("it rewrites the membership to this one member on every start: in a cluster of "
                              "several members each restart splits it and loses writes; it belongs to a one-off "
                              "recovery, which `kubesmith etcd restore` (a snapshot restore) does")
_NO_FSYNC = NoOption("etcd would not fsync its log: a crash or power loss loses acknowledged writes or corrupts "
                     "the data directory")
# no CIS check names it, and spec.security.allowInsecure takes CIS ids only: no opt-in
_PEER_SAN = NoOption("etcd would accept a peer's client certificate whatever addresses it names: any certificate "
                     "of the etcd peer CA could join or impersonate a member from anywhere; kubesmith's peer "
                     "certificates name each member's address, so nothing needs it")
_NO_RECONFIG_CHECK = NoOption("etcd would accept a member change that loses quorum (adding a member the cluster "
                              "cannot reach, removing one of too few started members): the cluster stops taking "
                              "writes; kubesmith changes members one at a time with the check on")
_V2_API = NoOption("etcd would serve its v2 API, which has none of the v3 API's authentication and role checks "
                   "and reads another key space: nothing of Kubernetes uses it")
# etcd 3.5.1 --help: "Serve v2 requests through the v3 backend under a given prefix. Deprecated and to be
# decommissioned in v3.6" (it serves them only with --enable-v2; etcd 3.6 has neither flag)
_V2V3_API = NoOption("etcd would serve its v2 API (through the v3 store, under this prefix), as --enable-v2 does: "
                     "the v2 API has none of the v3 API's authentication and role checks, nothing of Kubernetes "
                     "uses it, and etcd 3.6 removed the flag")


class EtcdModule(Module):
    key = "etcd"
    position = 10
    title = "etcd key-value store"
    options = EtcdOptions
    roles = frozenset({"etcd"})
    binary = "etcd"
    trial = Trial("etcd", 60.0, rank=1)  # settles slower than the leader-elected controllers
    managed = Managed(
        flags={
            "name": "spec.hosts[].name", "data-dir": "dataDir", "listen-client-urls": "clientPort",
            "advertise-client-urls": "clientPort", "listen-peer-urls": "peerPort",
            "initial-advertise-peer-urls": "peerPort",
            "initial-cluster": "the hosts with the etcd role (spec.hosts)", "initial-cluster-state":
                "the member's history (new on the cluster's first start, existing when a member joins one)",
            # etcd bootstraps from one source: next to --initial-cluster it stops with "multiple discovery or
            # bootstrap flags are set"
            "discovery": _BOOTSTRAP, "discovery-srv": _BOOTSTRAP, "discovery-srv-name": _BOOTSTRAP,
            "discovery-fallback": _BOOTSTRAP, "discovery-proxy": _BOOTSTRAP,
            "initial-cluster-token": "metadata.name", "listen-metrics-urls": "metricsPort",
            "client-cert-auth": PKI, "trusted-ca-file": PKI, "cert-file": PKI, "key-file": PKI, "auto-tls": PKI,
            "peer-client-cert-auth": PKI, "peer-trusted-ca-file": PKI, "peer-cert-file": PKI,
            "peer-key-file": PKI, "peer-auto-tls": PKI, "heartbeat-interval": "heartbeatInterval",
            "election-timeout": "electionTimeout", "snapshot-count": "snapshotCount",
            "quota-backend-bytes": "quotaBackendBytes", "auto-compaction-retention": "autoCompactionRetention",
            "auto-compaction-mode": "autoCompactionMode", "log-level": "logLevel",
            "force-new-cluster": _FORCE_NEW_CLUSTER, "unsafe-no-fsync": _NO_FSYNC,
            # renamed without experimental- in etcd 3.6
            "experimental-peer-skip-client-san-verification": _PEER_SAN,
            "peer-skip-client-san-verification": _PEER_SAN,
            "strict-reconfig-check": _NO_RECONFIG_CHECK, "enable-v2": _V2_API,
            "experimental-enable-v2v3": _V2V3_API,
        },
        harmless={"force-new-cluster": False, "unsafe-no-fsync": False,
                  "experimental-peer-skip-client-san-verification": False,
                  "peer-skip-client-san-verification": False, "strict-reconfig-check": True,
                  "enable-v2": False, "experimental-enable-v2v3": ""},
    )

    def check(self, spec: Any, options: EtcdOptions, registry: Any) -> list[OptionProblem]:
        # etcd refuses to start otherwise: "--election-timeout should be at least as 5 times as
        # --heartbeat-interval" (server/embed/config.go, Validate)
        if options.election_timeout < 5 * options.heartbeat_interval:
            return [OptionProblem(("electionTimeout",), f"{options.election_timeout} ms is less than 5 times "
                                  f"heartbeatInterval ({options.heartbeat_interval} ms): etcd refuses to start")]
        # "--election-timeout[...ms] is too long, and should be set less than 50000ms" (etcd 3.5.1 run)
        if options.election_timeout > MAX_ELECTION_MS:
            return [OptionProblem(("electionTimeout",), f"{options.election_timeout} ms is more than "
                                  f"{MAX_ELECTION_MS} ms, etcd's longest election timeout: etcd refuses to start")]
        return _retention_problems(options) + _zero_limit_problems(options)

    def contribute(self, ctx: HostContext, options: EtcdOptions) -> Contribution:
        host, cluster = ctx.host, ctx.cluster
        server, peer = certificate("etcd-server"), certificate("etcd-peer")
        ca_file = layout.pki_path(authority("etcd-ca").cert_file)
        client_url = f"https://{url_host(host.address)}:{options.client_port}"
        peer_url = f"https://{url_host(host.address)}:{options.peer_port}"
        bootstrap = cluster.bootstrap_of(host.name)  # read by etcd only on its first start
        flags = {
            "name": host.name,
            "data-dir": options.data_dir,
            "listen-client-urls": ",".join(dict.fromkeys((client_url, f"https://127.0.0.1:{options.client_port}"))),
            "advertise-client-urls": client_url,
            "listen-peer-urls": peer_url,
            "initial-advertise-peer-urls": peer_url,
            "initial-cluster": bootstrap.initial_cluster,
            "initial-cluster-state": bootstrap.state,
            "initial-cluster-token": f"{cluster.name}-etcd",
            "listen-metrics-urls": f"http://127.0.0.1:{options.metrics_port}",
            "client-cert-auth": True,
            "trusted-ca-file": ca_file,
            "cert-file": server.cert_path,
            "key-file": server.key_path,
            "auto-tls": False,
            "peer-client-cert-auth": True,
            "peer-trusted-ca-file": ca_file,
            "peer-cert-file": peer.cert_path,
            "peer-key-file": peer.key_path,
            "peer-auto-tls": False,
            "heartbeat-interval": options.heartbeat_interval,
            "election-timeout": options.election_timeout,
            "snapshot-count": options.snapshot_count,
            "quota-backend-bytes": options.quota_backend_bytes,
            # periodic is etcd's default: the flag is written only for revision mode
            "auto-compaction-mode": None if options.auto_compaction_mode == "periodic" else
            options.auto_compaction_mode,
            "auto-compaction-retention": options.auto_compaction_retention,
            "log-level": options.log_level,
        }
        tls_files = (ca_file, server.cert_path, server.key_path, peer.cert_path, peer.key_path)
        service = Service(
            name="etcd",
            component=self.key,
            description="etcd key-value store",
            binary="etcd",
            argv=render_flags(flags, options.extra_args),
            user="etcd",
            group="etcd",
            wanted_by="etcd-online.target",
            after=("network-online.target",),
            readiness=Probe(kind="etcd", host=host.address, port=options.client_port, path="/health",
                            ca="etcd-ca", client_certificate="etcd-healthcheck-client"),
            restart=RestartPolicy(delay_seconds=5),
            needs_files=tls_files,
            watch_files=tls_files[1:],
            state_directory=options.data_dir,
            ports=(options.client_port, options.peer_port, options.metrics_port),
            tools=("etcdctl", "etcdutl"),  # snapshots and restores (kubesmith etcd snapshot/restore)
        )
        return Contribution(
            services=[service],
            certificates=["etcd-server", "etcd-peer", "etcd-healthcheck-client"],
            users=[system_user("etcd", options.data_dir, "etcd key-value store")],
        )


MODULE = EtcdModule()
