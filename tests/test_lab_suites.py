"""Lab hosts from another Debian suite, and a runtime for their python3: the pieces, without a lab.

Booting such a lab takes minutes, so the proof that it applies and runs healthy is the manual run in
docs/operations.md ("Hosts on another Debian release"); these check what it is made of.
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from kubesmith.backends import runtime_bundle
from kubesmith.lab import rootfs
from kubesmith.lab.config import LabConfig
from kubesmith.lab.errors import LabError

MACHINE_SOURCES = """Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: https://vendor.example/apt
Suites: nodistro
Components: main
"""
VENDOR_LIST = "deb [arch=amd64 signed-by=/usr/share/keyrings/v.gpg] https://vendor.example/apt cloud-sdk-bookworm main\n"


@pytest.fixture
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """A bookworm machine with deb822 Debian sources and a one-line vendor source."""
    sources = [tmp_path / "debian.sources", tmp_path / "vendor.list"]
    sources[0].write_text(MACHINE_SOURCES)
    sources[1].write_text(VENDOR_LIST)
    monkeypatch.setattr(rootfs, "host_suite", lambda: "bookworm")
    monkeypatch.setattr(rootfs, "apt_sources", lambda: sources)
    return sources


def test_another_suite_is_built_from_the_machines_debian_mirrors_renamed(machine: list[Path]) -> None:
    read = rootfs.read_sources(machine)
    assert [(s.uri, s.suite) for s in read][-1] == ("https://vendor.example/apt", "cloud-sdk-bookworm")
    assert read[-1].signed_by == "/usr/share/keyrings/v.gpg"
    renamed = rootfs.sources_for_suite(read, "bookworm", "trixie")
    assert [source.line() for source in renamed] == [
        "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main",
        "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie-updates main",
        ("deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian-security "
         "trixie-security main")]  # the vendor's bookworm repository does not fit trixie: left out


def test_companion_suites_the_mirror_lacks_are_left_out(machine: list[Path]) -> None:
    asked: list[tuple[str, str]] = []

    def published(uri: str, suite: str) -> bool:
        asked.append((uri, suite))
        return suite == "sid"

    kept = rootfs.suite_sources("sid", "bookworm", rootfs.read_sources(machine), published)
    assert [(s.uri, s.suite) for s in kept] == [("http://deb.debian.org/debian", "sid")]
    assert len(asked) == len(set(asked)) == 3  # each (mirror, suite) asked once


def test_an_unknown_suite_fails_before_anything_is_written(machine: list[Path], tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rootfs, "mirror_has", lambda uri, suite: False)
    config = LabConfig(cache_dir=tmp_path / "cache", suite="trixy")
    with pytest.raises(LabError, match=r"unknown Debian suite 'trixy': the mirror http://deb.debian.org/debian "
                                       r"has no dists/trixy/Release"):
        rootfs.build_rootfs(config, lambda _: None)
    assert not (tmp_path / "cache").exists()


def test_suite_names_are_codenames(machine: list[Path]) -> None:
    assert rootfs.chosen_suite(None) is None
    assert rootfs.chosen_suite("bookworm") is None  # the machine's own: the default image, as without --suite
    assert rootfs.chosen_suite("trixie") == "trixie"
    with pytest.raises(LabError, match="by its codename"):
        rootfs.chosen_suite("stable")
    for bad in ("../etc", "Trixie", "trixie-security", ""):
        with pytest.raises(LabError, match="is not a Debian codename"):
            rootfs.chosen_suite(bad)


def test_each_suite_has_its_own_cached_image_and_stamp(machine: list[Path], tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    default, trixie = LabConfig(cache_dir=cache), LabConfig(cache_dir=cache, suite="trixie")
    assert (default.rootfs, rootfs.stamp_path(default)) == (cache / "rootfs", cache / "rootfs.stamp")  # as before
    assert trixie.rootfs == cache / "suites/trixie/rootfs"
    for config in (default, trixie):
        config.rootfs.mkdir(parents=True)
        rootfs.stamp_path(config).write_text(json.dumps(rootfs.wanted_stamp(rootfs.image_suite(config))))
        assert rootfs.is_cached(config)
    assert json.loads(rootfs.stamp_path(trixie).read_text())["suite"] == "trixie"
    rootfs.stamp_path(trixie).write_text(json.dumps(rootfs.wanted_stamp("bookworm")))
    assert not rootfs.is_cached(trixie)  # an image of another suite is never used for this one
    monkeypatch.setattr(rootfs, "mirror_has", lambda uri, suite: True)
    [written] = rootfs.image_sources(trixie)
    assert written == cache / "suites/trixie/sources.list" and " trixie-security main" in written.read_text()
    assert rootfs.image_sources(default) == machine  # the machine's own files, untouched


def _wheel(path: Path, members: dict[str, bytes]) -> Path:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    path.write_bytes(buffer.getvalue())
    return path


def test_another_minor_gets_its_own_extension_modules_from_the_cached_wheel(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the files named for the host's minor come from its wheel: each interpreter loads its own, and
    the pure-Python files (the same release) and `abi3` modules are shipped once, as installed here."""
    wheel = _wheel(tmp_path / "pydantic_core-2.46.4-cp313-cp313-manylinux_2_17_x86_64.whl", {
        "pydantic_core/__init__.py": b"",
        "pydantic_core/_pydantic_core.cpython-313-x86_64-linux-gnu.so": b"313",
        "cryptography/hazmat/bindings/_rust.abi3.so": b"abi3"})
    assert runtime_bundle.wheel_extensions(wheel, "3.13") == {
        "pydantic_core/_pydantic_core.cpython-313-x86_64-linux-gnu.so": (b"313", True)}
    assert runtime_bundle.wheel_extensions(wheel, "3.12") == {}

    def no_pip(*args: object, **kwargs: object) -> None:
        raise AssertionError("a cached wheel is used without pip")

    monkeypatch.setattr(runtime_bundle.subprocess, "run", no_pip)
    assert runtime_bundle.fetch_wheel("pydantic-core", "2.46.4", "3.13", tmp_path) == wheel


def test_a_wheel_pip_cannot_fetch_says_how_to_bring_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class Failed:
        returncode, stderr = 1, "ERROR: No matching distribution found for cffi==2.0.0"

    monkeypatch.setattr(runtime_bundle.subprocess, "run", lambda *args, **kwargs: Failed())
    with pytest.raises(runtime_bundle.BundleError, match=rf"cffi 2.0.0 wheel for cp313 .*No matching distribution"
                                                          rf".*Put it in {tmp_path}"):
        runtime_bundle.fetch_wheel("cffi", "2.0.0", "3.13", tmp_path)


def test_a_cluster_of_the_operators_minor_needs_no_other_wheels(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    fetched: list[str] = []
    monkeypatch.setattr(runtime_bundle, "minor_extensions", lambda minor, _: fetched.append(minor) or {})
    monkeypatch.setattr(runtime_bundle, "_runtime_files", dict)
    monkeypatch.setattr(runtime_bundle, "pause_archive", lambda _: b"pause")
    own = runtime_bundle.running_python()
    assert runtime_bundle.build_bundle(tmp_path, [own]).pythons == (own,)
    assert fetched == []
    others = {"3.9", "3.13"} - {own}
    assert runtime_bundle.build_bundle(tmp_path, [own, *others]).pythons == tuple(
        sorted({own, *others}, key=lambda minor: tuple(map(int, minor.split(".")))))
    assert sorted(fetched) == sorted(others)


def test_the_bundle_covers_the_minors_the_hosts_were_seen_to_run() -> None:
    def host(python: str | None) -> SimpleNamespace:
        return SimpleNamespace(environment=SimpleNamespace(facts=SimpleNamespace(python=python)))

    plan = SimpleNamespace(hosts=[host("3.13"), host("3.11"), host(None), host("3.13")])
    assert runtime_bundle.host_pythons(plan) == {"3.11", "3.13"}  # type: ignore[arg-type]
