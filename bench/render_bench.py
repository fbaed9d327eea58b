"""Benchmark: render an N-node cluster (default 1,000) against two baselines measured in the same run.

* cfssl: the same number of leaf certificates issued with `cfssl gencert` (Debian golang-cfssl),
  ECDSA P-256, batched as one cfssl process per certificate (cfssl gencert issues one per call).
* raw: the bare `cryptography` cost of the same work (key generation + signing + PEM), no I/O.

Prints the times and the ratios render/cfssl and render/raw. Usage:
    python bench/render_bench.py [--nodes N] [--cfssl-sample K]
With --cfssl-sample K, only K cfssl certificates are issued and the total is extrapolated (stated).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from kubesmith.backends.render import render
from kubesmith.pki.issue import new_ca, new_leaf
from kubesmith.pki.keys import generate, to_pem
from kubesmith.plan.evaluate import evaluate
from kubesmith.spec.load import load_spec_file
from kubesmith.versions.registry import load_registry


def write_spec(path: Path, nodes: int) -> Path:
    hosts = [{"name": f"cp{i}", "address": f"10.0.0.{i}", "roles": ["control-plane", "etcd"]} for i in (1, 2, 3)]
    hosts += [{"name": f"node{i:04d}", "address": f"10.1.{i // 250}.{i % 250 + 1}", "roles": ["node"]}
              for i in range(nodes)]
    document = {"apiVersion": "kubesmith.io/v1alpha1", "kind": "Cluster", "metadata": {"name": "bench"},
                "spec": {"kubernetesVersion": "1.33.2", "controlPlaneEndpoint": "10.0.0.100:6443", "hosts": hosts}}
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def raw_crypto(requests) -> float:  # type: ignore[no-untyped-def]
    """Key generation + signing + PEM for every leaf (and the three CAs), no files."""
    start = time.perf_counter()
    ca_key = generate("ecdsa-p256")
    ca = new_ca("kubernetes-ca", ca_key, 3650, _now())
    for _ in range(2):
        new_ca("other-ca", generate("ecdsa-p256"), 3650, _now())
    for request in requests:
        key = generate("ecdsa-p256")
        to_pem(key)
        new_leaf(request, key.public_key(), ca, ca_key, 365, _now()).public_bytes(serialization.Encoding.PEM)
    return time.perf_counter() - start


def cfssl_gencert(count: int, work: Path) -> float:
    """`cfssl gencert` once per certificate (ECDSA P-256), four processes at a time on 2 cores."""
    cfssl = shutil.which("cfssl")
    if cfssl is None:
        raise SystemExit("cfssl not found: apt-get install -y golang-cfssl")
    csr = {"key": {"algo": "ecdsa", "size": 256}, "CN": "system:node:bench", "names": [{"O": "system:nodes"}],
           "hosts": ["node0001", "10.1.0.2"]}
    (work / "ca-csr.json").write_text(json.dumps({"CN": "kubernetes-ca", "key": {"algo": "ecdsa", "size": 256}}))
    (work / "csr.json").write_text(json.dumps(csr))
    (work / "config.json").write_text(json.dumps({"signing": {"default": {
        "expiry": "8760h", "usages": ["digital signature", "key encipherment", "server auth", "client auth"]}}}))
    ca = subprocess.run([cfssl, "gencert", "-initca", str(work / "ca-csr.json")], capture_output=True, check=True)
    bundle = json.loads(ca.stdout)
    (work / "ca.pem").write_text(bundle["cert"])
    (work / "ca-key.pem").write_text(bundle["key"])
    argv = [cfssl, "gencert", f"-ca={work / 'ca.pem'}", f"-ca-key={work / 'ca-key.pem'}",
            f"-config={work / 'config.json'}", str(work / "csr.json")]

    def one(_: int) -> None:
        result = subprocess.run(argv, capture_output=True, check=True)
        x509.load_pem_x509_certificate(json.loads(result.stdout)["cert"].encode())

    start = time.perf_counter()
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(one, range(count)))
    return time.perf_counter() - start


def _now():  # type: ignore[no-untyped-def]
    import datetime as dt

    return dt.datetime.now(dt.timezone.utc)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--cfssl-sample", type=int, default=0, help="issue only this many with cfssl and extrapolate")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kubesmith-bench-") as tmp:
        work = Path(tmp)
        spec = write_spec(work / "cluster.yaml", args.nodes)
        start = time.perf_counter()
        plan = evaluate(load_spec_file(spec).cluster, load_registry())
        plan_time = time.perf_counter() - start
        requests = [r for host in plan.hosts for r in host.certificates]
        start = time.perf_counter()
        result = render(plan, work / "state", work / "out")
        render_time = time.perf_counter() - start
        files = sum(len(host.files) + 2 for host in plan.hosts) + 1
        start = time.perf_counter()
        rerender = render(plan, work / "state", work / "out")
        rerender_time = time.perf_counter() - start
        raw_time = raw_crypto(requests)
        sample = args.cfssl_sample or len(requests)
        (work / "cfssl").mkdir()
        cfssl_measured = cfssl_gencert(sample, work / "cfssl")
        cfssl_time = cfssl_measured * len(requests) / sample
    print(f"cluster: {len(plan.hosts)} hosts ({args.nodes} nodes + 3 control-plane), {len(requests)} leaf "
          f"certificates, {files} files")
    print(f"plan (evaluate, not part of render):  {plan_time:8.2f} s")
    print(f"kubesmith render (PKI + all files):   {render_time:8.2f} s   ({len(result.issued)} certificates issued, "
          f"{result.files_written} files written)")
    print(f"kubesmith re-render (nothing to do):  {rerender_time:8.2f} s   ({len(rerender.issued)} issued)")
    print(f"raw cryptography keygen+sign+PEM:     {raw_time:8.2f} s")
    note = "" if sample == len(requests) else f"   (extrapolated from {sample} certificates: {cfssl_measured:.2f} s)"
    print(f"cfssl gencert x {len(requests)}:              {cfssl_time:8.2f} s{note}")
    print(f"ratio cfssl/render: {cfssl_time / render_time:6.1f}x faster than cfssl")
    print(f"ratio render/raw:   {render_time / raw_time:6.2f}x the raw crypto cost")


if __name__ == "__main__":
    main()
