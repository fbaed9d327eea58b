"""Component modules. Order matters only for presentation; dependencies are explicit in the plan."""

from __future__ import annotations

from kubesmith.modules.addons import AddonsModule
from kubesmith.modules.agent import AgentModule
from kubesmith.modules.api_load_balancer import ApiLoadBalancerModule
from kubesmith.modules.apiserver import ApiserverModule
from kubesmith.modules.base import Module
from kubesmith.modules.ca_service import CaServiceModule
from kubesmith.modules.container_runtime import ContainerRuntimeModule
from kubesmith.modules.control_plane_vip import ControlPlaneVipModule
from kubesmith.modules.controller_manager import ControllerManagerModule
from kubesmith.modules.core_dns import CoreDnsModule
from kubesmith.modules.etcd import EtcdModule
from kubesmith.modules.kubelet import KubeletModule
from kubesmith.modules.pod_network import PodNetworkModule
from kubesmith.modules.proxy import ProxyModule
from kubesmith.modules.scheduler import SchedulerModule

MODULES: tuple[Module, ...] = (
    EtcdModule(),
    ApiserverModule(),
    ControllerManagerModule(),
    SchedulerModule(),
    ContainerRuntimeModule(),
    PodNetworkModule(),
    ApiLoadBalancerModule(),
    KubeletModule(),
    ProxyModule(),
    CaServiceModule(),
    ControlPlaneVipModule(),
    AgentModule(),
    AddonsModule(),
    CoreDnsModule(),
)

# each component's default trial length, as its module declares it (Module.trial), by its service: the agent's
# defaults (through the cluster facts) and the services whose configurations it keeps
TRIAL_SECONDS: dict[str, float] = {module.trial.service: module.trial.seconds for module in MODULES
                                   if module.trial is not None}
