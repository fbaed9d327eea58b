"""Shared helpers: run the `kubesmith` command as users do, in this process or in a child process.

In-process runs go through `run_guarded`, the same entry point the console script uses, so exit
codes and error printing are the real ones; a few tests also start real child processes.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest_plugins = ["lab_fixture", "lab_cluster", "sshd_fixture", "run_support"]  # lab_hosts, lab_cluster, cluster, admin, local_sshd, run_netns

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


# Machine-wide settings that the tests' components change: a kubelet writes these unless they hold
# (its protectKernelDefaults is off), and `kubesmith lab up` raises root's inotify limits.
MACHINE_SETTINGS = ("vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
                    "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes", "fs/inotify/max_user_instances",
                    "fs/inotify/max_user_watches")
SAVED_SETTINGS = pytest.StashKey[dict[str, str]]()


def pytest_configure(config: pytest.Config) -> None:
    """The machine's settings as the run found them, kept by the main process: under xdist a worker
    that ends early must not put them back under the lab that the other worker still runs. The real
    CoreDNS goes on PATH, where kubesmith finds it to build the cluster DNS image (as a user's would)."""
    from k8s_support import coredns_on_path

    interpreter_scripts_first()
    coredns_on_path()
    if not hasattr(config, "workerinput"):
        proc_sys = Path("/proc/sys")
        config.stash[SAVED_SETTINGS] = {name: (proc_sys / name).read_text() for name in MACHINE_SETTINGS
                                        if (proc_sys / name).exists()}


def interpreter_scripts_first() -> None:
    """The console scripts installed with this interpreter (kubesmith, kubectl, etcd) first on PATH.
    A version manager's shims (pyenv's, on this project's machines) run a shell script and a few
    processes before each: about 0.07 CPU-s a call, and a run makes thousands of such calls. Only when
    kubesmith is installed there: a system interpreter's directory (/usr/bin) is not moved."""
    scripts = str(Path(sys.executable).parent)
    if (Path(scripts) / "kubesmith").exists():
        rest = [entry for entry in os.environ.get("PATH", "").split(os.pathsep) if entry != scripts]
        os.environ["PATH"] = os.pathsep.join([scripts, *rest])


def pytest_unconfigure(config: pytest.Config) -> None:
    """The run puts back every such setting as the machine had it, but for the inotify limits while
    another lab is up (another run's, or `kubesmith lab up`'s): its hosts need them. A short run put
    them back beside a whole suite once, and both of that suite's labs failed with "too many open
    files" (run ag, docs/testing.md)."""
    saved = config.stash.get(SAVED_SETTINGS, {})
    if saved and os.geteuid() == 0:
        keep_inotify = other_labs_up()
        for name, value in saved.items():
            if not (keep_inotify and name.startswith("fs/inotify/")):
                (Path("/proc/sys") / name).write_text(value)


def other_labs_up(netns_dir: Path = Path("/run/netns")) -> bool:
    """Whether a lab's network namespace is there: this run's labs are down by now."""
    return any(netns_dir.glob("ks-test-*")) or (netns_dir / "kubesmith-lab").exists()


# The lab tests are the suite's critical path, and much of their time is waiting (trials, reboots,
# restarts) that other work can fill. So they run on two labs, a worker and a lab of four hosts each (a
# lab's hosts are one pytest process's own), beside the local tests on the third worker; a module not
# named here runs on the first lab. A third lab (the upgrades, on the local tests' worker once they were
# done) made that worker the critical path, and three clusters side by side ran every lab test slower
# (docs/testing.md, run n: local 1,531 s + upgrades 394 beside lab 1,547 and lab2 1,468). A fourth worker
# was slower each time it was tried (runs d and i). On `lab2` the modules run in this order: the upgrades
# first, whose set-up is then the lab's first apply, at the older release (after another module it
# was a reset and an apply from nothing, 150 s), and which leave the cluster at examples/lab.yaml.
LAB_OF_MODULE = {"test_upgrade_lab": "lab2", "test_day2_lab": "lab2", "test_relay": "lab2",
                 "test_rollout_lab": "lab2"}
# Tests without a lab that run on a lab's worker all the same, before its lab boots. The crash test is
# the heaviest of them. Moving more (renewal, PKI and live plan to `lab`, run l) started `lab` later, and
# every lab test slowed (docs/testing.md). The two `kubesmith run` modules stay together on one worker:
# their kubelets share the machine's kubepods cgroup.
WORKER_OF_LOCAL_MODULE = {"test_render_crash": "lab2"}


def module_of(item: pytest.Item) -> str:
    return item.module.__name__ if item.module is not None else ""


def xdist_group(item: pytest.Item) -> str:
    """`local`, or the lab an item runs on: the worker it runs on under xdist."""
    module = module_of(item)
    if not item.get_closest_marker("lab"):
        return WORKER_OF_LOCAL_MODULE.get(module, "local")
    return LAB_OF_MODULE.get(module, "lab")


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Each item in its group (above). Without xdist the lab tests come last, on one lab: the lab
    hosts run a whole cluster until the session ends, and on two cores that would slow every test
    after them. The lab modules named in LAB_OF_MODULE follow the others, in its order."""
    for item in items:
        item.add_marker(pytest.mark.xdist_group(xdist_group(item)))
    order = list(LAB_OF_MODULE)
    items.sort(key=lambda item: (item.get_closest_marker("lab") is not None, module_position(item, order)))


def module_position(item: pytest.Item, order: list[str]) -> int:
    module = module_of(item)
    return order.index(module) if module in order else -1


@dataclass(frozen=True)
class Result:
    returncode: int
    stdout: str
    stderr: str


def kubesmith(*args: str, cwd: Path | None = None) -> Result:
    """Run `kubesmith ARGS` in this process through the console script's own guard."""
    from kubesmith.cli import cli
    from kubesmith.cli.common import run_guarded

    out, err = io.StringIO(), io.StringIO()
    saved_argv, saved_cwd = sys.argv, Path.cwd()
    sys.argv = ["kubesmith", *args]
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = run_guarded(cli)
            except SystemExit as exc:  # commands may exit directly, as under the console script
                code = exc.code if isinstance(exc.code, int) else 1
    finally:
        sys.argv = saved_argv
        os.chdir(saved_cwd)
    return Result(int(code), out.getvalue(), err.getvalue())


def kubesmith_process(*args: str, cwd: Path | None = None) -> Result:
    """Run the installed `kubesmith` console script in a child process."""
    result = subprocess.run(["kubesmith", *args], capture_output=True, text=True, cwd=cwd, timeout=60)
    return Result(result.returncode, result.stdout, result.stderr)

