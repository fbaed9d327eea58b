"""Workload images for tests, built here from files on this machine (no registry is reachable):
Debian's busybox-static as `kubesmith.local/busybox:1`, packed by kubesmith's own archive writer."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from kubesmith.images import ImageFile, oci_archive

BUSYBOX = Path("/bin/busybox")
BUSYBOX_IMAGE = "kubesmith.local/busybox:1"


def busybox_archive(directory: Path) -> Path:
    """An image archive whose one file is /bin/busybox (commands run as `/bin/busybox APPLET ...`)."""
    if not BUSYBOX.exists():
        raise AssertionError(f"{BUSYBOX} is missing: install Debian's busybox-static (see .ci/install.sh)")
    path = directory / "busybox.tar"
    path.write_bytes(oci_archive(BUSYBOX_IMAGE, (ImageFile("/bin/busybox", BUSYBOX.read_bytes()),),
                                 ("/bin/busybox", "sh")))
    return path


def web_manifest(name: str, replicas: int, spread_over: Sequence[str] = ()) -> str:
    """A Deployment of busybox httpd pods that answer with their own host name, and its ClusterIP Service.
    `spread_over`: at most one replica per node, on these nodes only (the ones the image was imported to)."""
    placement = (
        "      affinity:\n        podAntiAffinity:\n          requiredDuringSchedulingIgnoredDuringExecution:\n"
        f"          - labelSelector: {{matchLabels: {{app: {name}}}}}\n"
        "            topologyKey: kubernetes.io/hostname\n"
        "        nodeAffinity:\n          requiredDuringSchedulingIgnoredDuringExecution:\n"
        "            nodeSelectorTerms:\n            - matchExpressions:\n"
        f"              - {{key: kubernetes.io/hostname, operator: In, values: [{', '.join(spread_over)}]}}\n"
        if spread_over else "")
    return f"""apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
{placement}      terminationGracePeriodSeconds: 1  # httpd is PID 1: it ignores SIGTERM, so a drain would wait 30 s
      containers:
      - name: web
        image: {BUSYBOX_IMAGE}
        imagePullPolicy: Never
        command: ["/bin/busybox", "sh", "-c",
                  "/bin/busybox hostname > /www/index.html; exec /bin/busybox httpd -f -v -p 8080 -h /www"]
        volumeMounts: [{{name: www, mountPath: /www}}]
      volumes: [{{name: www, emptyDir: {{}}}}]
---
apiVersion: v1
kind: Service
metadata: {{name: {name}}}
spec:
  selector: {{app: {name}}}
  ports: [{{port: 80, targetPort: 8080}}]
"""


def http_get(address: str, port: int = 80) -> list[str]:
    """The shell command that fetches / from address:port with busybox nc (its wget crashes in Debian's
    build) and prints the body's last line."""
    return ["/bin/busybox", "sh", "-c",
            f"printf 'GET / HTTP/1.0\\r\\n\\r\\n' | /bin/busybox nc -w 5 {address} {port} | /bin/busybox tail -n 1"]
