"""Lab hosts from another Debian suite, and a runtime for their python3: the pieces, without a lab.

Booting such a lab takes minutes, so the proof that it applies and runs healthy is the manual run in
docs/operations.md ("Hosts on another Debian release"); these check what it is made of.
"""

from __future__ import annotations

import fcntl
import io
import json
import threading
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest
from polling import poll

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
    # Why a stand-in: this machine's suite and /etc/apt sources are what they are; a test cannot make it a
    # bookworm machine with a vendor source on demand, nor rewrite /etc/apt.
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


# Why a stand-in: the distributions installed in this interpreter are fixed; a test cannot install another
# build or release here on demand (cryptography's cp311-abi3 wheel, a multidict that needs 3.11).
def _dist(name: str, version: str, files: tuple[str, ...] = (), requires: tuple[str, ...] = (),
          python: str = ">=3.9", wheel: str = "") -> SimpleNamespace:
    """An installed distribution as importlib.metadata shows one, reduced to what the bundle reads."""
    return SimpleNamespace(metadata={"Name": name, "Requires-Python": python}, version=version, files=files,
                           requires=requires, read_text=lambda file: wheel if file == "WHEEL" else None)


def test_an_older_minor_gets_stable_abi_modules_built_for_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """cryptography's `_rust.abi3.so` installed here is `cp311-abi3`: 3.10 cannot load it (undefined symbol
    PyType_GetName), so an older minor gets the same release's build for the oldest abi3 it loads."""
    so = "cryptography/hazmat/bindings/_rust.abi3.so"
    _wheel(tmp_path / "cryptography-48.0.1-cp311-abi3-manylinux_2_34_x86_64.whl", {so: b"311"})
    _wheel(tmp_path / "cryptography-48.0.1-cp39-abi3-manylinux2014_x86_64.whl", {so: b"39"})
    _wheel(tmp_path / "cryptography-47.0.0-cp37-abi3-manylinux2014_x86_64.whl", {so: b"other release"})
    dist = _dist("cryptography", "48.0.1", (so,), wheel="Tag: cp311-abi3-manylinux_2_34_x86_64\n")
    monkeypatch.setattr(runtime_bundle, "_dependency_closure", lambda root: [dist])
    monkeypatch.setattr(runtime_bundle, "minor_requirements", lambda minor: [])
    monkeypatch.setattr(runtime_bundle.subprocess, "run", _no_pip)
    assert runtime_bundle.minor_extensions("3.10", tmp_path) == {so: (b"39", True)}
    assert runtime_bundle.minor_extensions("3.12", tmp_path) == {}  # loads the one installed here


def test_a_requirement_only_an_older_minor_has_is_shipped_from_its_wheel(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """aiohttp needs async-timeout below 3.11: not installed on a 3.11 machine, so the bundle brings its wheel
    for the hosts' 3.10 (else every command that imports aiohttp fails there)."""
    aiohttp = _dist("aiohttp", "3.14.5", requires=('async-timeout<6.0,>=4.0; python_version < "3.11"',
                                                   'typing_extensions>=4.4; python_version < "3.13"', "yarl<2,>=1.17"))
    installed = {"kubesmith": _dist("kubesmith", "0.1.0"), "typing_extensions": _dist("typing_extensions", "4.15.0")}

    def distribution(name: str) -> SimpleNamespace:
        if name not in installed:
            raise runtime_bundle.metadata.PackageNotFoundError(name)
        return installed[name]

    monkeypatch.setattr(runtime_bundle, "_dependency_closure", lambda root: [aiohttp])
    monkeypatch.setattr(runtime_bundle.metadata, "distribution", distribution)
    assert runtime_bundle.minor_requirements("3.10") == [("async-timeout", "<6.0,>=4.0")]
    assert runtime_bundle.minor_requirements("3.11") == []
    fits = _wheel(tmp_path / "async_timeout-5.0.1-py3-none-any.whl", {"async_timeout/__init__.py": b"5"})
    _wheel(tmp_path / "async_timeout-6.0.0-py3-none-any.whl", {"async_timeout/__init__.py": b"6"})
    monkeypatch.setattr(runtime_bundle.subprocess, "run", _no_pip)
    assert runtime_bundle.fetch_wheel("async-timeout", "<6.0,>=4.0", "3.10", tmp_path, abi="none") == fits
    assert runtime_bundle.wheel_files(fits) == {"async_timeout/__init__.py": (b"5", False)}


def test_a_release_that_left_the_hosts_minor_behind_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """multidict 7 needs 3.11: pip's own error ("no matching distribution") would not say that the remedy is
    another release on this machine, since the bundle ships what is installed here."""
    monkeypatch.setattr(runtime_bundle, "_dependency_closure",
                        lambda root: [_dist("multidict", "7.2.1", python=">=3.11")])
    monkeypatch.setattr(runtime_bundle.subprocess, "run", _no_pip)
    with pytest.raises(runtime_bundle.BundleError, match=r"python 3.10 ships multidict 7.2.1 as installed here, which "
                                                         r"needs Python >=3.11: install a release of multidict"):
        runtime_bundle.minor_extensions("3.10", tmp_path)


def _no_pip(*args: object, **kwargs: object) -> None:
    raise AssertionError("a cached wheel is used without pip")


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
    assert fetched == sorted(others, key=lambda minor: tuple(map(int, minor.split("."))), reverse=True)  # the oldest
    # last: its stable-ABI modules are the ones shipped, and they load on every later minor


def test_the_bundle_covers_the_minors_the_hosts_were_seen_to_run() -> None:
    def host(python: str | None) -> SimpleNamespace:
        return SimpleNamespace(environment=SimpleNamespace(facts=SimpleNamespace(python=python)))

    plan = SimpleNamespace(hosts=[host("3.13"), host("3.11"), host(None), host("3.13")])
    assert runtime_bundle.host_pythons(plan) == {"3.11", "3.13"}  # type: ignore[arg-type]


def test_a_lab_brought_up_while_another_builds_the_image_waits_and_uses_that_one(
        machine: list[Path], tmp_path: Path) -> None:
    """The suite's lab workers start together on a fresh machine: one builds, the others wait for its
    lock and find the image cached (each running mmdebstrap into the same staging directory broke them)."""
    config = LabConfig(cache_dir=tmp_path / "cache")
    config.image_dir.mkdir(parents=True)
    said: list[str] = []

    def progress(line: str) -> None:
        said.append(line)
        if line.startswith("building"):
            raise LabError("built a second time")

    with (config.image_dir / "build.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the first lab, building
        waiting = threading.Thread(target=lambda: said.append(str(rootfs.ensure_rootfs(config, progress))))
        waiting.start()
        poll(lambda: any(line.startswith("another lab is building") for line in said), 30, "the wait said")
        config.rootfs.mkdir()  # the first lab's image, ready
        rootfs.stamp_path(config).write_text(json.dumps(rootfs.wanted_stamp("bookworm")))
    waiting.join(timeout=30)
    assert said == [f"another lab is building the image in {config.image_dir}; waiting for it", str(config.rootfs)]
