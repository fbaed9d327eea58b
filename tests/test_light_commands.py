"""The commands that run many times a minute stay light: what they never use, they never import.

`kubesmith probe` (status's batch over SSH on every host), `kubesmith wait` (every unit's gate),
`network`, `node` and `config` (units and roll-outs on the hosts) are short processes whose cost is
mostly Python's imports; `--help` of every command lists options, nothing more. Each case runs the
command's real code path in a fresh interpreter (probes and files reach nothing) and fails when one
of the modules it must not load is in sys.modules: an eager import added at the top of a module on
the path (cli/*.py, health, agent, formats, ...) brings it back. No timing is asserted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# the libraries (and kubesmith's own heavy layers) that cost most to import
SSH, MODEL, CRYPTO, HTTP, YAML, RETRY = "asyncssh", "pydantic", "cryptography", "aiohttp", "yaml", "tenacity"
PLANNER = ("kubesmith.spec.model", "kubesmith.plan.evaluate", "kubesmith.modules", "kubesmith.pki",
           "kubesmith.backends.render")
EVERY = (SSH, MODEL, CRYPTO, HTTP, YAML, RETRY, "rich", *PLANNER)

RUN = """
import atexit, sys
record, sys.argv = sys.argv[1], ["kubesmith", *sys.argv[2:]]
atexit.register(lambda: open(record, "w").write("\\n".join(sorted(sys.modules))))
from kubesmith.cli import main
main()
"""


def loaded(tmp_path: Path, args: list[str], stdin: str = "") -> set[str]:
    record = tmp_path / "modules.txt"
    run = subprocess.run([sys.executable, "-c", RUN, str(record), *args], input=stdin, capture_output=True, text=True,
                         timeout=120, env=os.environ)
    assert run.returncode in (0, 3, 4, 5), run.stderr  # refused, missing: as the case means; never a crash
    assert "Traceback" not in run.stderr, run.stderr
    return set(record.read_text().split())


def present(modules: set[str], forbidden: tuple[str, ...]) -> list[str]:
    return sorted(name for name in forbidden if any(m == name or m.startswith(name + ".") for m in modules))


HELP = ["--help", "probe --help", "wait --help", "network up --help", "node drain --help", "config wait --help",
        "agent --help", "ca serve --help", "validate --help", "plan --help", "status --help", "init --help"]


@pytest.mark.parametrize("command", HELP)
def test_help_loads_no_heavy_module(tmp_path: Path, command: str) -> None:
    assert present(loaded(tmp_path, command.split()), EVERY) == []


def test_a_probe_batch_loads_neither_ssh_nor_the_planner_nor_cryptography(tmp_path: Path) -> None:
    """Every operation kind status sends, each refused or failing at once on this host."""
    ca = tmp_path / "ca.crt"
    batch = [{"probe": "tcp://127.0.0.1:9", "mode": "check"},
             {"probe": "http://127.0.0.1:9/healthz", "mode": "check"},
             {"probe": f"https://127.0.0.1:9/readyz?ca={ca}", "mode": "check"},
             {"probe": f"https://127.0.0.1:9/?ca={ca}", "mode": "request", "method": "GET", "path": "/version"},
             {"probe": f"https://127.0.0.1:9/?ca={ca}", "mode": "expiry"}]
    assert present(loaded(tmp_path, ["probe", "--timeout", "1"], json.dumps(batch)), EVERY) == []


@pytest.mark.parametrize("probe", ["tcp://127.0.0.1:9", "https://127.0.0.1:9/readyz?ca=ca.crt"])
def test_a_wait_loads_its_retry_loop_and_nothing_heavier(tmp_path: Path, probe: str) -> None:
    modules = loaded(tmp_path, ["wait", "--deadline", "0", "--quiet", "--pki-dir", str(tmp_path), probe])
    assert present(modules, EVERY) == [RETRY]


def test_config_status_and_wait_load_no_renewal_no_pki(tmp_path: Path) -> None:
    document = tmp_path / "scheduler.yaml"
    document.write_text("kind: KubeSchedulerConfiguration\n")
    components = tmp_path / "components.json"
    components.write_text(json.dumps({"minor": "1.36", "components": [
        {"name": "kube-scheduler", "argv": ["--config", str(document)], "paths": [str(document)],
         "binary": "kube-scheduler"}]}))
    files = ["--components-file", str(components), "--checkpoints-dir", str(tmp_path / "checkpoints")]
    assert present(loaded(tmp_path, ["config", "status", *files]), EVERY) == []
    waited = loaded(tmp_path, ["config", "wait", "kube-scheduler", "--timeout", "0", "--since", "0", *files])
    assert present(waited, EVERY) == [RETRY]


def test_the_node_side_commands_load_neither_ssh_nor_the_planner(tmp_path: Path) -> None:
    down = loaded(tmp_path, ["network", "down", "--config", str(tmp_path / "network.json")])
    assert present(down, EVERY) == []
    delete = loaded(tmp_path, ["node", "delete", "n1", "--kubeconfig", str(tmp_path / "admin.conf")])
    assert present(delete, EVERY) == [HTTP, YAML]  # the API client's, which it uses
    state = loaded(tmp_path, ["agent", "--show-state", "--state-file", str(tmp_path / "state.json")])
    assert present(state, EVERY) == []


def test_addons_apply_loads_the_api_client_but_not_the_modules(tmp_path: Path) -> None:
    """Every apply runs it on a control-plane host: the planner's modules and pydantic cost 0.35 CPU-s
    there, for a file-name suffix it shares with them."""
    (tmp_path / "addons").mkdir()
    modules = loaded(tmp_path, ["addons", "apply", "--kubeconfig", str(tmp_path / "missing.conf"),
                                "--dir", str(tmp_path / "addons")])
    assert present(modules, EVERY) == [HTTP, YAML]  # the API client's, which it uses


def test_validate_loads_the_spec_model_but_not_ssh_nor_the_planner(tmp_path: Path) -> None:
    spec = tmp_path / "cluster.yaml"
    spec.write_text(json.dumps({"apiVersion": "kubesmith.io/v1alpha1", "kind": "Cluster", "metadata": {"name": "light"},
                                "spec": {"kubernetesVersion": "1.36.2", "hosts": [
                                    {"name": "n1", "address": "10.9.0.1", "roles": ["control-plane", "etcd", "node"]}]}}))
    modules = loaded(tmp_path, ["validate", str(spec)])
    assert present(modules, (SSH, CRYPTO, HTTP, RETRY, "kubesmith.plan.evaluate", "kubesmith.backends")) == []


def test_the_lab_ssh_relay_starts_without_site_packages_or_the_labs_settings() -> None:
    """The lab's ProxyCommand, as its ssh_config writes it, starts for every SSH connection to a lab host
    (the tests make about a thousand): Python without site's .pth files (`-S`), and of kubesmith only the
    relay, setns and the errors module. Here it fails at once, on a namespace that does not exist, in one
    line; the imports it made are those Python reports (PYTHONPROFILEIMPORTTIME)."""
    from asyncssh.misc import split_args

    from kubesmith.lab.config import LabConfig
    from kubesmith.lab.sshkeys import proxy_command

    command = proxy_command(LabConfig(netns="kubesmith-no-such-netns")).replace("%h %p", "10.213.0.11 22")
    run = subprocess.run(split_args(command), capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPROFILEIMPORTTIME": "1"})
    assert run.returncode == 1, run.stderr
    messages = [line for line in run.stderr.splitlines() if not line.startswith("import time:")]
    assert messages == ["kubesmith lab proxy: 10.213.0.11:22 via netns kubesmith-no-such-netns: [Errno 2] No such "
                        "file or directory: '/run/netns/kubesmith-no-such-netns'"], run.stderr
    modules = {line.split("|")[-1].strip() for line in run.stderr.splitlines() if line.startswith("import time:")}
    assert {"kubesmith.lab.proxy", "kubesmith.lab.setns"} <= modules, modules
    assert not {"site", "kubesmith.lab.config", "dataclasses", "certifi"} & modules, modules
