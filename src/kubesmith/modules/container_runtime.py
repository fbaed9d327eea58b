"""containerd with runc: the container runtime of every host with the `node` role.

kubesmith writes containerd's whole configuration (it never relies on a distribution's file):
its socket and directories, the cgroup driver the kubelet shares (the kubelet follows the
runtime's driver only where the runtime can say which it uses, and containerd 1.6 cannot), the
sandbox image, the CNI directories, and the oom-score restriction a host without
CAP_SYS_RESOURCE needs (otherwise runc fails every sandbox with "can't get final child's PID
from pipe"). Readiness is containerd's metrics endpoint on loopback, which answers once its
plugins, the CRI one included, are loaded.

Images come without a registry: kubesmith builds its own sandbox image (`kubesmith.images`) and
ships it, with the archives listed in `images`, to /var/lib/kubesmith/images; a oneshot unit
(`kubesmith-images`, running `kubesmith images load`) imports them once containerd answers.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Annotated, Any

from pydantic import Field

from kubesmith import layout
from kubesmith.images import PAUSE_IMAGE
from kubesmith.modules.base import Managed, Module, NoOption, Trial
from kubesmith.modules.merge import deep_merge
from kubesmith.vocabulary.environment import HostEnvironment
from kubesmith.vocabulary.facts import Contribution, HostContext
from kubesmith.vocabulary.model import File, Probe, Service, Source
from kubesmith.vocabulary.types import MAX_IMAGES, AbsolutePath, ExtraConfig, ImageReference, Port, StrictModel, at_most

CRI_PLUGIN = "io.containerd.grpc.v1.cri"
CONFIG_PATH = "/etc/containerd/config.toml"
IMAGES_DIR = f"{layout.LIB}/kubesmith/images"
ARCHIVE_MODE = 0o600  # an operator's image archive on a node: root imports it, no one else reads it
RUNC_SYSTEMD_CGROUP = ("plugins", CRI_PLUGIN, "containerd", "runtimes", "runc", "options", "SystemdCgroup")
_TCP = NoOption("kubesmith serves containerd's API on its unix socket only: over TCP it has no authentication, "
                "and anyone who reaches the port runs containers as root on the node")
_OWNER = NoOption("the containerd socket stays owned by root (uid and gid 0): whoever may open it runs containers "
                  "as root on the node, so another owner or group is local root for its members")


ImageArchives = Annotated[list[AbsolutePath], at_most(MAX_IMAGES, "image archives", "each is a tar of up to 8 GiB")]


class ContainerRuntimeOptions(StrictModel):
    enabled: bool = Field(default=True, description="Run containerd on nodes; off when the hosts bring their own "
                          "CRI runtime (then set spec.components.kubelet.containerRuntimeEndpoint).")
    binary: AbsolutePath = Field(default="/usr/bin/containerd", description="containerd on the host "
                        "(Debian's package, with runc and containernetworking-plugins); apply does not ship it.")
    socket: AbsolutePath = Field(default="/run/containerd/containerd.sock", description="containerd's gRPC socket "
                        "(the kubelet's container runtime endpoint).")
    root_dir: AbsolutePath = Field(default=f"{layout.LIB}/containerd", description="containerd's persistent data "
                          "(images, snapshots).")
    state_dir: AbsolutePath = Field(default="/run/containerd", description="containerd's runtime state.")
    metrics_port: Port = Field(default=1338, description="Plain-HTTP metrics port on 127.0.0.1 (readiness).")
    sandbox_image: ImageReference = Field(default=PAUSE_IMAGE, description="Pod sandbox image; kubesmith builds its own "
                               "(from source) and imports it on every node, no registry needed. Another image "
                               "must be on the nodes already (see images).")
    images: ImageArchives = Field(
        default=[], description="Image archives (OCI layout or `docker save` tarballs; absolute paths on the "
        "machine running kubesmith) to import on every node at each apply.")
    cni_bin_dir: AbsolutePath = Field(default="/usr/lib/cni", description="Directory of the CNI plugins "
                             "(Debian's containernetworking-plugins).")
    cni_conf_dir: AbsolutePath = Field(default="/etc/cni/net.d", description="Directory of the CNI network configuration.")
    restrict_oom_score_adj: bool | None = Field(
        default=None, description="Keep containers' oom_score_adj at or above containerd's; default: on where "
        "the host lacks CAP_SYS_RESOURCE.", json_schema_extra={"x-derived-from": "the host's capabilities"})
    extra_config: ExtraConfig = Field(default={}, description="Merged into containerd's config.toml.")
    load_deadline: float = Field(default=300.0, gt=0, le=86400, description="Seconds `kubesmith images load` waits for "
                                 "containerd to answer.")


class ContainerRuntimeModule(Module):
    key = "container_runtime"
    position = 50
    title = "containerd container runtime"
    options = ContainerRuntimeOptions
    roles = frozenset({"node"})
    trial = Trial("containerd", 30.0, rank=7)
    # containerd's config.toml: kubesmith writes version 2 tables (a `version: 3` file ignores them, and with
    # them SystemdCgroup and the sandbox image), the runc runtime, and the socket the kubelet dials
    managed = Managed(
        config={
            ("version",): "kubesmith (version 2: the format of the plugin tables it writes)",
            ("plugins", CRI_PLUGIN, "containerd", "default_runtime_name"):
                "kubesmith (runc, the runtime it configures)",
            ("grpc", "address"): "socket", ("plugins", CRI_PLUGIN, "sandbox_image"): "sandboxImage",
            # the metrics endpoint is plain HTTP without authentication, on loopback where the readiness probe
            # dials
            ("metrics", "address"): "metricsPort",
            # containerd's API is root on the node: never over TCP, and its socket stays root's alone
            ("grpc", "tcp_address"): _TCP, ("grpc", "uid"): _OWNER, ("grpc", "gid"): _OWNER,
            # runc's cgroup driver is the kubelet's: with two drivers each manages pods' cgroups its own way
            RUNC_SYSTEMD_CGROUP: "spec.components.kubelet.cgroupDriver",
        },
        same={("version",): 2, ("plugins", CRI_PLUGIN, "containerd", "default_runtime_name"): "runc",
              ("grpc", "tcp_address"): "", ("grpc", "uid"): 0, ("grpc", "gid"): 0},
    )

    def contribute(self, ctx: HostContext, options: ContainerRuntimeOptions) -> Contribution:
        if not options.enabled:
            return Contribution()
        environment = ctx.host.environment
        config = ctx.shared(("containerd-config", environment), lambda: File(
            path=CONFIG_PATH, mode=0o644, data=containerd_config(options, environment), format="toml"))
        service = Service(
            name="containerd",
            component=self.key,
            description="containerd container runtime",
            binary=options.binary,
            argv=(f"--config={CONFIG_PATH}",),
            user="root",
            group="root",
            wanted_by="node-online.target",
            after=("network-online.target", "local-fs.target"),
            readiness=Probe(kind="http", host="127.0.0.1", port=options.metrics_port, path="/v1/metrics",
                            run_on=ctx.host.name),
            needs_files=(CONFIG_PATH,),
            state_directory=options.root_dir,
            ports=(options.metrics_port,),
            hardening=False,
            # containers live in their own cgroups under the runtime's: systemd must neither manage
            # them nor kill the shims when containerd restarts (as containerd's own unit has it)
            unit_settings=(("Delegate", "yes"), ("KillMode", "process"), ("OOMScoreAdjust", "-999")),
        )
        images, loader = ctx.shared("container-images", lambda: (image_files(options), images_service(options)))
        return Contribution(services=[service, loader] if images else [service], files=[config, *images])


def image_files(options: ContainerRuntimeOptions) -> list[File]:
    """The archives each node imports: kubesmith's sandbox image (when it is the one in use) and the spec's.
    An operator's archive may hold anything private: on the nodes only root (which imports it) reads it."""
    files = [File(f"{IMAGES_DIR}/{PurePosixPath(path).name}", ARCHIVE_MODE, source=Source("image-archive", path))
             for path in options.images]
    if options.sandbox_image == PAUSE_IMAGE:
        files.append(File(f"{IMAGES_DIR}/kubesmith-pause.tar", 0o644, source=Source("sandbox-image", "pause")))
    return files


def images_service(options: ContainerRuntimeOptions) -> Service:
    return Service(
        name="kubesmith-images",
        component="container_runtime",
        description="kubesmith: import the node's image archives into containerd",
        binary="kubesmith",
        argv=("images", "load", "--containerd", f"unix://{options.socket}", "--dir", IMAGES_DIR,
              "--deadline", f"{options.load_deadline:g}"),
        user="root",
        group="root",
        wanted_by="node-online.target",
        after=("containerd.service", "containerd-online.service"),
        hardening=False,
        oneshot=True,
    )


def containerd_config(options: ContainerRuntimeOptions, environment: HostEnvironment) -> dict[str, Any]:
    """containerd 1.6's configuration (version 2) for this host's environment."""
    restrict = options.restrict_oom_score_adj
    if restrict is None:
        restrict = not environment.can_lower_oom_score
    return deep_merge({
        "version": 2,
        "root": options.root_dir,
        "state": options.state_dir,
        "grpc": {"address": options.socket},
        "metrics": {"address": f"127.0.0.1:{options.metrics_port}"},
        "plugins": {CRI_PLUGIN: {
            "sandbox_image": options.sandbox_image,
            "restrict_oom_score_adj": restrict,
            "containerd": {
                "default_runtime_name": "runc",
                "runtimes": {"runc": {"runtime_type": "io.containerd.runc.v2",
                                      "options": {"SystemdCgroup": environment.cgroup_driver == "systemd"}}},
            },
            "cni": {"bin_dir": options.cni_bin_dir, "conf_dir": options.cni_conf_dir},
            # pods' network namespaces under containerd's state directory, not the host's /run/netns
            "netns_mounts_under_state_dir": True,
        }},
    }, options.extra_config)


def runtime_endpoint(ctx: HostContext) -> str:
    """The CRI endpoint the kubelet uses: this module's socket."""
    return ctx.cluster.runtime_endpoint


MODULE = ContainerRuntimeModule()
