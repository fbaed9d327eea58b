"""`plan --offline` of thousands of hosts (issue 32): every host is written, as the whole plan would be,
and the plan is streamed, so memory does not grow with the hosts. Time never decides here (the machine is
shared; bench/plan_scale_bench.py measures it)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import kubesmith
from plan_support import plan_of_text, registry
from kubesmith.plan.evaluate import evaluate_lazily
from kubesmith.plan.jsonout import plan_json, write_plan_json
from kubesmith.plan.text import plan_text
from kubesmith.spec.load import load_spec_text

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from plan_scale_bench import spec_yaml  # noqa: E402


@pytest.fixture(scope="module")
def two_thousand(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("scale") / "hosts.yaml"
    path.write_text(spec_yaml(2000))
    return path


def test_the_streamed_json_plan_of_two_thousand_hosts_is_the_whole_plan(two_thousand: Path) -> None:
    """Written host by host as each is planned, the bytes are those of the plan built whole."""
    result = kubesmith("plan", str(two_thousand), "--offline", "-o", "json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert [host["name"] for host in document["hosts"]] == [f"h{index:05d}" for index in range(2000)]
    assert document["hosts"][-1]["address"] == "10.1.7.250"
    assert result.stdout == plan_json(plan_of_text(two_thousand.read_text()))


def test_the_streamed_text_plan_and_a_selection_are_those_of_the_whole_plan(two_thousand: Path) -> None:
    plan = plan_of_text(two_thousand.read_text())
    result = kubesmith("plan", str(two_thousand), "--offline")
    assert result.returncode == 0, result.stderr
    assert result.stdout == plan_text(plan, plan.hosts)
    assert result.stdout.count("\nhost h") == 2000
    chosen = kubesmith("plan", str(two_thousand), "--offline", "-o", "json", "--host", "h01999", "--host", "h00001")
    assert [host["name"] for host in json.loads(chosen.stdout)["hosts"]] == ["h00001", "h01999"]  # in file order


def test_a_plan_of_no_selected_host_is_still_a_plan() -> None:
    plan, hosts = evaluate_lazily(load_spec_text(spec_yaml(4), "four.yaml", registry()).cluster, registry(),
                                  only=frozenset())
    out = io.StringIO()
    write_plan_json(plan, out, hosts)
    assert out.getvalue() == plan_json(plan)
    assert json.loads(out.getvalue())["hosts"] == []


def _peak_mb(spec: Path) -> float:
    """The peak resident memory of `kubesmith plan SPEC --offline -o json`, in its own process."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))}
    with open(os.devnull, "w") as null:
        process = subprocess.Popen([sys.executable, "-c", "import sys; from kubesmith.cli import main; main()",
                                    "plan", str(spec), "--offline", "-o", "json"], stdout=null, env=env)
        _, status, usage = os.wait4(process.pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return usage.ru_maxrss / 1024


@pytest.mark.slow
def test_memory_barely_grows_from_one_thousand_to_four_thousand_hosts(tmp_path: Path) -> None:
    """Each host is planned, written and let go: three times more hosts add only what their entries in the
    cluster file take (about 4 KB each: 12 MB). Holding every host's plan added 15 KB a host, holding the
    JSON text 30 KB more; the bound lies between, with room for allocator noise."""
    peaks = {}
    for hosts in (1000, 4000):
        spec = tmp_path / f"hosts-{hosts}.yaml"
        spec.write_text(spec_yaml(hosts))
        peaks[hosts] = _peak_mb(spec)
    assert peaks[4000] - peaks[1000] < 35, peaks
