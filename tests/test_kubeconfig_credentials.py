"""`Credentials.of_kubeconfig` (node drain/delete, add-ons): a file that is not a kubeconfig with embedded
credentials is named with what it lacks, in the operator's words, never in Python's."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import yaml

from kubesmith.apiclient import ApiError, Credentials
from kubesmith.pki.documents import kubeconfig


def test_a_kubeconfig_kubesmith_writes_gives_its_server_and_credentials(tmp_path: Path) -> None:
    path = tmp_path / "admin.conf"
    path.write_text(yaml.safe_dump(kubeconfig("lab", "https://10.213.0.10:6443", "admin", b"ca", b"cert", b"key")))
    credentials = Credentials.of_kubeconfig(path)
    assert (credentials.server, credentials.ca_pem, credentials.cert_pem, credentials.key_pem) == (
        "https://10.213.0.10:6443", b"ca", b"cert", b"key")


@pytest.mark.parametrize("text, lacking", [
    ("h1\n", "no clusters[0].cluster.server"),                                   # /etc/hostname
    ("clusters: []\n", "no clusters[0].cluster.server"),
    ("clusters: [{cluster: {server: https://a:6443}}]\n", "no clusters[0].cluster.certificate-authority-data"),
    ("clusters: [{cluster: {server: https://a:6443, certificate-authority-data: " + base64.b64encode(b"ca").decode()
     + "}}]\nusers: [{user: {token: x}}]\n", "no users[0].user.client-certificate-data"),
    ("clusters: [{cluster: {server: s, certificate-authority-data: x}}]\nusers: [{user: {client-certificate-data: "
     "x, client-key-data: x}}]\n", "is not base64"),
    ("{: [\n", "not YAML"),
])
def test_a_file_that_is_not_one_is_named_with_what_it_lacks(tmp_path: Path, text: str, lacking: str) -> None:
    path = tmp_path / "k.conf"
    path.write_text(text)
    with pytest.raises(ApiError) as caught:
        Credentials.of_kubeconfig(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: not a kubeconfig with embedded credentials (") and lacking in message, message
    assert "indices" not in message and "KeyError" not in message
