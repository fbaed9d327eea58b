"""Test helpers for the CA service: a real CA on disk, `kubesmith ca serve` as a child process,
and a real `cfssl serve`. Ports are chosen by the servers themselves (port 0) or by the kernel."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from kubesmith.pki import issue, keys
from net_support import free_port, listening
from kubesmith.vocabulary.model import CertificateRequest

CFSSL = shutil.which("cfssl")
KUBESMITH = shutil.which("kubesmith") or str(Path(sys.executable).with_name("kubesmith"))


@dataclass(frozen=True)
class CaFiles:
    directory: Path
    ca_cert: Path
    ca_key: Path
    tls_cert: Path
    tls_key: Path

    def ca_pem(self) -> bytes:
        return self.ca_cert.read_bytes()


def request(name: str, cn: str, orgs: tuple[str, ...] = (), usages: tuple[str, ...] = ("digital signature",
            "key encipherment", "server auth"), dns: tuple[str, ...] = (), ips: tuple[str, ...] = ()) -> CertificateRequest:
    return CertificateRequest(name, "kubernetes-ca", cn, orgs, usages, dns, ips, "", "", "root", "root")


def make_ca(directory: Path, validity_days: float = 1.0) -> CaFiles:
    """kubernetes-ca and the CA service's serving certificate (localhost, 127.0.0.1)."""
    directory.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.timezone.utc)
    ca_key = keys.generate("ecdsa-p256")
    ca_cert = issue.new_ca("kubernetes-ca", ca_key, 3650, now)
    tls_key = keys.generate("ecdsa-p256")
    tls_cert = issue.new_leaf(request("ca-service-serving", "kubesmith-ca-service", dns=("localhost",),
                                      ips=("127.0.0.1",)), tls_key.public_key(), ca_cert, ca_key, validity_days, now)
    files = CaFiles(directory, directory / "ca.crt", directory / "ca.key", directory / "serving.crt",
                    directory / "serving.key")
    files.ca_cert.write_bytes(ca_cert.public_bytes(Encoding.PEM))
    files.ca_key.write_bytes(keys.to_pem(ca_key))
    files.tls_cert.write_bytes(tls_cert.public_bytes(Encoding.PEM))
    files.tls_key.write_bytes(keys.to_pem(tls_key))
    for path in (files.ca_key, files.tls_key):
        path.chmod(0o600)
    return files


def kubesmith(*args: str, check: bool = True, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([KUBESMITH, *args], capture_output=True, text=True,
                            timeout=60, env=env)
    if check and result.returncode != 0:
        raise AssertionError(f"kubesmith {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
    return result


def ca_args(files: CaFiles) -> list[str]:
    return ["--ca-cert", str(files.ca_cert), "--ca-key", str(files.ca_key), "--state-dir",
            str(files.directory / "state")]


def create_token(files: CaFiles, *extra: str) -> dict:
    """`kubesmith token create` in this process: tests make dozens, and a child process each cost 0.6 s
    of start-up (10 s of a race test's 14) for a command that only writes the token store."""
    from conftest import kubesmith as kubesmith_here
    created = kubesmith_here("token", "create", "-o", "json", *ca_args(files), *extra)
    if created.returncode != 0:
        raise AssertionError(f"kubesmith token create failed ({created.returncode}):\n{created.stderr}")
    return json.loads(created.stdout)


@dataclass
class Server:
    process: subprocess.Popen[str]
    url: str
    log: Path

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def start_ca_service(files: CaFiles, *extra: str, port: int = 0) -> Server:
    """`kubesmith ca serve` on 127.0.0.1; the URL comes from its `serving on` log line."""
    log = files.directory / f"ca-serve-{time.monotonic_ns()}.log"
    handle = log.open("w")
    process = subprocess.Popen(
        [KUBESMITH, "ca", "serve", "--listen", "127.0.0.1", "--port", str(port),
         *ca_args(files), "--tls-cert", str(files.tls_cert), "--tls-key", str(files.tls_key), *extra],
        stdout=handle, stderr=subprocess.STDOUT, text=True)
    handle.close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        match = re.search(r"serving on (https://\S+)", log.read_text())
        if match:
            return Server(process, match.group(1), log)
        if process.poll() is not None:
            raise AssertionError(f"ca serve exited {process.returncode}:\n{log.read_text()}")
        time.sleep(0.05)
    process.kill()
    raise AssertionError(f"ca serve did not start:\n{log.read_text()}")


def cfssl_config(auth_key_hex: str, profiles: dict[str, list[str]], expiry: str = "1h",
                 remote: str | None = None) -> dict:
    """A cfssl config: every profile requires the auth key; with `remote`, a client config."""
    signing: dict = {"default": {"usages": ["signing", "key encipherment", "client auth"], "expiry": expiry,
                                 "auth_key": "key"},
                     "profiles": {name: {"usages": usages, "expiry": expiry, "auth_key": "key"}
                                  for name, usages in profiles.items()}}
    if remote:
        signing["default"]["auth_remote"] = {"remote": "ca", "auth_key": "key"}
        for profile in signing["profiles"].values():
            profile["auth_remote"] = {"remote": "ca", "auth_key": "key"}
    document = {"signing": signing, "auth_keys": {"key": {"type": "standard", "key": auth_key_hex}}}
    if remote:
        document["remotes"] = {"ca": remote}
    return document


def start_cfssl_serve(directory: Path, ca: CaFiles, config: dict, tls: bool = False) -> Server:
    """A real `cfssl serve` on 127.0.0.1 with a kernel-chosen free port (retried if taken)."""
    assert CFSSL, "cfssl is not installed (Debian golang-cfssl)"
    config_file = directory / "cfssl-server.json"
    config_file.write_text(json.dumps(config))
    for _ in range(5):
        port = free_port()
        log = directory / f"cfssl-{port}.log"
        handle = log.open("w")
        args = [CFSSL, "serve", "-address", "127.0.0.1", "-port", str(port), "-ca", str(ca.ca_cert),
                "-ca-key", str(ca.ca_key), "-config", str(config_file), "-loglevel", "2"]
        if tls:
            args += ["-tls-cert", str(ca.tls_cert), "-tls-key", str(ca.tls_key)]
        process = subprocess.Popen(args, stdout=handle, stderr=subprocess.STDOUT, text=True)
        handle.close()
        if listening(port, process):
            scheme = "https" if tls else "http"
            return Server(process, f"{scheme}://127.0.0.1:{port}", log)
        process.kill()
        process.wait()
    raise AssertionError(f"cfssl serve did not start:\n{log.read_text()}")


def load_cert(pem: bytes | str) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem.encode() if isinstance(pem, str) else pem)


def env_with_ca(ca: CaFiles) -> dict[str, str]:
    """Go (cfssl) trusts SSL_CERT_FILE: the cfssl client trusts only our CA."""
    env = dict(os.environ)
    env["SSL_CERT_FILE"] = str(ca.ca_cert)
    env.pop("SSL_CERT_DIR", None)
    return env
