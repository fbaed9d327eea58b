"""Every shipped example validates and plans through the real command line."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).parent.parent / "examples").glob("*.yaml"))


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_example_validates_and_plans(example: Path) -> None:
    validated = subprocess.run(["kubesmith", "validate", str(example)], capture_output=True, text=True)
    assert validated.returncode == 0, validated.stderr
    planned = subprocess.run(["kubesmith", "plan", str(example), "--offline", "--output", "json"], capture_output=True, text=True)
    assert planned.returncode == 0, planned.stderr
    plan = json.loads(planned.stdout)
    assert {host["name"] for host in plan["hosts"]} and all(host["services"] for host in plan["hosts"])


def test_examples_exist() -> None:
    assert {p.stem for p in EXAMPLES} >= {"single-node", "ha", "lab"}
