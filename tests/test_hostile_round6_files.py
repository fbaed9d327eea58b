"""Hostile paths, files and operator-side state, audit round 6 (issue 32): the directories kubesmith keeps
on the operator's machine (a state directory, a token store, a rendered tree) are never a system directory,
one holding one or the user's home, in any spelling or through a link, refused before anything is walked,
read or written (`reset --purge --state-dir /` walked all of `/` first); the files a user names for
kubesmith to write (`kubeconfig --out`, `--merge`'s kubeconfig, `etcd snapshot --out`) are checked before
a binding is granted or a host is reached; the SSH files are what SSH will read (a private key, a config
whose includes end); an image archive holds nothing outside itself. Each is one line naming its flag,
variable or file, exit 2 (3 for a file that cannot be read), and the legitimate neighbours still work.

Every command here that could write is run under `writes_only_inside(tmp_path)`: a refusal that came too
late fails the test instead of touching this machine's system directories.
"""

from __future__ import annotations

import builtins
import contextlib
import datetime as dt
import io
import json
import os
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ca_support import ca_args, make_ca
from conftest import ROOT, Result, kubesmith
from hostile_support import BOUND_SECONDS, bounded
from hostile_support import warm  # noqa: F401 (the module's autouse fixture)

SLOW_BOUND = 30.0  # commands that build a plan or issue a PKI
SPEC = (ROOT / "examples" / "single-node.yaml").read_text().replace("10.0.0.11", "192.0.2.11") + \
    "  components:\n    coreDns: {enabled: false}\n"
STATE_WHY = "the state directory holds the cluster's CAs and keys, and `reset --purge` deletes it"
TOKENS_WHY = "the token store (tokens.json) needs a directory of its own"
TREE_WHY = "render writes a tree of files (DIR/<host>/<path on host>) into a directory of its own"


def assert_refused(result: Result, code: int, *fragments: str) -> None:
    """Exit `code`, one error line holding every fragment, no traceback."""
    assert result.returncode == code, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr and "TookTooLong" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr
    for fragment in fragments:
        assert fragment in errors[0], result.stderr


@contextlib.contextmanager
def writes_only_inside(top: Path) -> Iterator[None]:
    """Any creation, write, rename, removal or mode change outside `top` fails (AssertionError) instead
    of happening: the cases below name /, /etc, /usr..., and run as root in CI."""
    root = os.path.realpath(top)
    saved: dict[tuple[Any, str], Any] = {}

    def check(path: Any) -> None:
        if isinstance(path, int):
            return
        real = os.path.realpath(os.fspath(path))
        if real != root and not real.startswith(root + "/") and real != os.devnull:
            raise AssertionError(f"kubesmith changed {real}, outside {root}")

    def wrap(owner: Any, name: str, arguments: int = 1, when: Any = None) -> None:
        original = getattr(owner, name)
        saved[(owner, name)] = original

        def guarded(*args: Any, **kwargs: Any) -> Any:
            if when is None or when(*args, **kwargs):
                for path in args[:arguments]:
                    check(path)
            return original(*args, **kwargs)
        setattr(owner, name, guarded)

    writing = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    for name in ("mkdir", "rmdir", "unlink", "remove", "chmod", "chown", "symlink", "mkfifo"):
        wrap(os, name)
    for name in ("rename", "replace"):
        wrap(os, name, 2)
    wrap(shutil, "rmtree")
    wrap(os, "open", when=lambda path, flags, *rest, **kw: bool(flags & writing))
    wrap(builtins, "open", when=lambda file, mode="r", *rest, **kw: any(c in mode for c in "wax+"))
    try:
        yield
    finally:
        for (owner, name), original in saved.items():
            setattr(owner, name, original)


def run(tmp_path: Path, *args: str, seconds: float = SLOW_BOUND) -> Result:
    (tmp_path / "c.yaml").write_text(SPEC)
    with bounded(seconds), writes_only_inside(tmp_path):
        return kubesmith(*args, cwd=tmp_path)


@pytest.fixture
def no_ssh(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records any attempt to open an SSH transport (and makes it fail)."""
    from kubesmith.transport import ssh

    attempts: list[str] = []

    async def refuse(self):  # type: ignore[no-untyped-def]
        attempts.append("connect")
        raise AssertionError("an SSH connection was attempted")

    monkeypatch.setattr(ssh.SshTransport, "__aenter__", refuse)
    return attempts


# ---- the state directory: never a system directory, whatever names it --------------------------------

# (the command after FILE, the --state-dir, what the message says it is)
STATE_DIRS: dict[str, tuple[tuple[str, ...], str, str]] = {
    "reset-purge-root": (("reset", "c.yaml", "--purge", "--yes"), "/", "/ is a system directory"),
    "reset-purge-etc": (("reset", "c.yaml", "--purge", "--yes"), "/etc", "/etc is a system directory"),
    "reset-purge-var-lib-slash": (("reset", "c.yaml", "--purge", "--yes"), "/var/lib/",
                                  "/var/lib is a system directory"),
    "reset-purge-dotdot-usr": (("reset", "c.yaml", "--purge", "--yes"), "/tmp/../usr", "/usr is a system directory"),
    "reset-purge-double-slash": (("reset", "c.yaml", "--purge", "--yes"), "//", "is a system directory"),
    "reset-purge-proc-self": (("reset", "c.yaml", "--purge", "--yes"), "/proc/self",
                              "/proc/self lies inside /proc, a kernel file system"),
    "reset-without-purge-run": (("reset", "c.yaml", "--yes"), "/run", "/run is a system directory"),
    "reset-purge-var-run-alias": (("reset", "c.yaml", "--purge", "--yes"), "/var/run", "/var/run is a system directory"),
    "render-usr-lib": (("render", "c.yaml", "--out-dir", "out"), "/usr/lib", "/usr/lib is a system directory"),
    "render-sys-kernel": (("render", "c.yaml", "--out-dir", "out"), "/sys/kernel", "lies inside /sys"),
    "render-dev-shm": (("render", "c.yaml", "--out-dir", "out"), "/dev/shm", "lies inside /dev"),
    "status-usr": (("status", "c.yaml", "--known-hosts", "kh"), "/usr", "/usr is a system directory"),
    "certs-check-boot": (("certs", "check-expiration", "c.yaml"), "/boot", "/boot is a system directory"),
    "certs-renew-var": (("certs", "renew", "c.yaml", "all"), "/var", "/var is a system directory"),
    "kubeconfig-etc": (("kubeconfig", "create", "c.yaml"), "/etc", "/etc is a system directory"),
    "kubeconfig-revoke-home": (("kubeconfig", "revoke", "c.yaml", "alice"), "/home", "/home is a system directory"),
    "apply-root": (("apply", "c.yaml", "--known-hosts", "kh"), "/", "/ is a system directory"),
    "plan-live-lib64": (("plan", "c.yaml", "--known-hosts", "kh"), "/lib64", "is a system directory"),
    "run-etc": (("run", "c.yaml", "--host", "node1"), "/etc", "/etc is a system directory"),
    "render-in-usr-share": (("render", "c.yaml", "--out-dir", "out"), "/usr/share/kubesmith-round6",
                            "lies inside /usr/share, a system directory of the OS's own files"),
    "status-in-etc-ssl": (("status", "c.yaml", "--known-hosts", "kh"), "/etc/ssl/private/k",
                          "lies inside /etc/ssl, a system directory of the OS's own files"),
    "certs-in-dpkg": (("certs", "check-expiration", "c.yaml"), "/var/lib/dpkg/k",
                      "lies inside /var/lib/dpkg, a system directory of the OS's own files"),
}


@pytest.mark.parametrize("case", sorted(STATE_DIRS))
def test_a_system_directory_as_the_state_dir_is_refused_first(case: str, tmp_path: Path, no_ssh: list[str]) -> None:
    command, state_dir, says = STATE_DIRS[case]
    (tmp_path / "kh").write_text("")
    result = run(tmp_path, *command, "--state-dir", state_dir)
    assert_refused(result, 2, f"--state-dir {state_dir!r}: ", says, STATE_WHY)
    assert no_ssh == [] and sorted(p.name for p in tmp_path.iterdir()) == ["c.yaml", "kh"]


@pytest.mark.parametrize(("value", "says"), [("/", "/ is a system directory"), ("/etc/", "/etc is a system directory")])
def test_a_system_directory_in_the_variable_is_refused_by_name(value: str, says: str, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch, no_ssh: list[str]) -> None:
    monkeypatch.setenv("KUBESMITH_STATE_DIR", value)
    result = run(tmp_path, "reset", "c.yaml", "--purge", "--yes")
    assert_refused(result, 2, f"$KUBESMITH_STATE_DIR ({value!r})", says)
    assert no_ssh == []


def test_a_link_to_the_root_as_the_state_dir_is_refused(tmp_path: Path, no_ssh: list[str]) -> None:
    (tmp_path / "state").symlink_to("/")
    result = run(tmp_path, "reset", "c.yaml", "--purge", "--yes", "--state-dir", "state")
    assert_refused(result, 2, "--state-dir 'state'", f"{tmp_path}/state leads to /, and / is a system directory")
    assert no_ssh == [] and (tmp_path / "state").is_symlink()


def test_the_home_directory_as_the_state_dir_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        no_ssh: list[str]) -> None:
    home = tmp_path / "alice"
    home.mkdir()
    (home / "notes.txt").write_text("mine\n")
    monkeypatch.setenv("HOME", str(home))
    result = run(tmp_path, "reset", "c.yaml", "--purge", "--yes", "--state-dir", str(home))
    assert_refused(result, 2, "is the home directory of the user running kubesmith")
    assert (home / "notes.txt").read_text() == "mine\n" and no_ssh == []


@pytest.mark.parametrize("target", ["missing", "loop"])
def test_a_dangling_link_as_the_state_dir_is_named(target: str, tmp_path: Path) -> None:
    """Was "state: File exists"."""
    if target == "loop":
        (tmp_path / "other").symlink_to("state")
    (tmp_path / "state").symlink_to("other" if target == "loop" else "missing/dir")
    result = run(tmp_path, "render", "c.yaml", "--out-dir", "out", "--state-dir", "state")
    assert_refused(result, 3, "state: a symbolic link to ", "which does not exist (or loops)")


@pytest.mark.parametrize("name", ["etc", "usr/lib", "home", "proc"])
def test_a_state_dir_named_like_a_system_directory_still_works(name: str, tmp_path: Path) -> None:
    """Relative names are the operator's own directories: ./etc is no /etc."""
    result = run(tmp_path, "render", "c.yaml", "--out-dir", "out", "--state-dir", name, "--host", "node1")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / name / "pki" / "cas" / "kubernetes-ca.key").exists()


def test_a_link_to_a_state_dir_of_its_own_still_works(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir(mode=0o700)
    (tmp_path / "state").symlink_to("real")
    result = run(tmp_path, "render", "c.yaml", "--out-dir", "out", "--state-dir", "state")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "real" / "pki" / "cas").is_dir()


# ---- render's tree ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("out_dir", "says"), [
    ("/", "/ is a system directory"),
    ("/etc/", "/etc is a system directory"),
    ("/sys/fs/kubesmith", "lies inside /sys, a kernel file system"),
    ("/proc/self/cwd", "lies inside /proc, a kernel file system"),
    ("root-link", "leads to /, and / is a system directory"),
])
def test_a_system_directory_as_the_rendered_tree_is_refused(out_dir: str, says: str, tmp_path: Path) -> None:
    (tmp_path / "root-link").symlink_to("/")
    result = run(tmp_path, "render", "c.yaml", "--out-dir", out_dir, "--state-dir", "state")
    assert_refused(result, 2, f"--out-dir {out_dir!r}: ", says, TREE_WHY)
    assert not (tmp_path / "state").exists()


def test_a_tree_named_like_a_system_directory_still_renders(tmp_path: Path) -> None:
    result = run(tmp_path, "render", "c.yaml", "--out-dir", "etc", "--state-dir", "state")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "etc" / "node1" / "manifest.json").exists()


# ---- the token store's directory ---------------------------------------------------------------------

@pytest.mark.parametrize(("command", "state_dir", "says"), [
    (("token", "list"), "/", "/ is a system directory"),
    (("token", "repair"), "/usr/lib", "/usr/lib is a system directory"),
    (("token", "revoke", "abcdef"), "/var", "/var is a system directory"),
    (("token", "create", "--ttl", "1h"), "/etc", "/etc is a system directory"),
    (("token", "list"), "/proc/self", "lies inside /proc, a kernel file system"),
    (("token", "create", "--ttl", "1h"), "/usr/lib/kubesmith-round6", "lies inside /usr/lib, a system directory"),
])
def test_a_system_directory_as_the_token_store_is_refused(command: tuple[str, ...], state_dir: str, says: str,
                                                          tmp_path: Path) -> None:
    result = run(tmp_path, *command, "--state-dir", state_dir, seconds=BOUND_SECONDS)
    assert_refused(result, 2, f"--state-dir {state_dir!r}: ", says, TOKENS_WHY)


@pytest.mark.parametrize(("value", "says"), [
    ("/", "state_dir '/': / is a system directory"),
    ("", "state_dir '' is empty"),
    ("   ", "state_dir '   ' is empty"),
    ("/boot", "state_dir '/boot': /boot is a system directory"),
])
def test_a_settings_file_naming_no_token_store_of_its_own_is_refused(value: str, says: str, tmp_path: Path) -> None:
    """state_dir "" was the current directory, "/" wrote /tokens.json."""
    (tmp_path / "ca.json").write_text(json.dumps({"state_dir": value}))
    result = run(tmp_path, "token", "list", "--ca-config", "ca.json", seconds=BOUND_SECONDS)
    assert_refused(result, 2, "ca.json: ", says)
    assert not Path("/tokens.json").exists()


def test_a_token_store_of_its_own_still_works(tmp_path: Path) -> None:
    ca = make_ca(tmp_path / "ca")
    with writes_only_inside(tmp_path):
        created = kubesmith("token", "create", "--ttl", "1h", *ca_args(ca))
        listed = kubesmith("token", "list", "--state-dir", str(ca.directory / "state"))
    assert created.returncode == 0 and listed.returncode == 0, created.stderr + listed.stderr
    assert "active" in listed.stdout


# ---- kubeconfig: where it goes is checked before anything is granted --------------------------------

@pytest.fixture
def granted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """`kubeconfig create` without a cluster: the grant (a binding, then a certificate) is recorded, and
    gives a small kubeconfig."""
    from kubesmith.backends.access import Grant
    from kubesmith.cli import kubeconfig_commands

    calls: list[str] = []

    class Access:
        def grant(self, user: str, role: str, validity: dt.timedelta) -> Grant:
            calls.append(user)
            config = {"apiVersion": "v1", "kind": "Config",
                      "clusters": [{"name": "single", "cluster": {"server": "https://192.0.2.11:6443"}}],
                      "users": [{"name": user, "user": {"token": "x"}}],
                      "contexts": [{"name": f"{user}@single", "context": {"cluster": "single", "user": user}}],
                      "current-context": f"{user}@single"}
            return Grant(user, role, dt.datetime(2030, 1, 1, tzinfo=dt.timezone.utc), "https://192.0.2.11:6443",
                         config)

    monkeypatch.setattr(kubeconfig_commands, "_access", lambda spec_file, state_dir, server: Access())
    return calls


def _laughs() -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{n}: &a{n} [{', '.join([f'*a{n - 1}'] * 10)}]" for n in range(1, 9)]
    return "\n".join(lines) + "\n"


# what $KUBECONFIG's file holds (bytes, or a maker), what the message says
MERGE_TARGETS: dict[str, tuple[Any, str]] = {
    "fifo": (lambda path: os.mkfifo(path), "is a FIFO, not a file kubesmith may replace"),
    "directory": (lambda path: path.mkdir(), "is a directory, not a file kubesmith may replace"),
    "binary-garbage": (b"\x00\x01\xff\xfe garbage", "not UTF-8 text"),
    "utf-16": ("apiVersion: v1\n".encode("utf-16"), "not UTF-8 text"),
    "a-list": (b"- 1\n- 2\n", "a kubeconfig is a mapping (apiVersion, clusters, users, contexts), this file holds a list"),
    "a-scalar": (b"hello\n", "this file holds a str"),
    "billion-laughs": (_laughs().encode(), "excessive aliasing"),
    "deep-nesting": (b"x: " + b"[" * 5000 + b"]" * 5000 + b"\n", "nested too deeply"),
    "two-documents": (b"apiVersion: v1\n---\napiVersion: v1\n", "expected a single document"),
    "duplicate-keys": (b"apiVersion: v1\nclusters: []\nclusters: []\n", "clusters"),
    "clusters-a-mapping": (b"apiVersion: v1\nclusters: {a: 1}\n", "clusters is not a list of named entries"),
    "users-of-strings": (b"apiVersion: v1\nusers: [alice, bob]\n", "users is not a list of named entries"),
    "tab-indented": (b"apiVersion: v1\nclusters:\n\t- name: a\n", "YAML syntax error"),
    "sparse-huge": (lambda path: os.truncate(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600), 64 << 20),
                    "larger than 16 MiB"),
}


@pytest.mark.parametrize("case", sorted(MERGE_TARGETS))
def test_a_kubeconfig_merge_cannot_start_on_a_file_that_is_no_kubeconfig(case: str, tmp_path: Path, granted: list[str],
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Was read after the binding was made: a FIFO hung, garbage or a list was a traceback, a directory
    left a binding and no kubeconfig."""
    content, says = MERGE_TARGETS[case]
    target = tmp_path / "kube-config"
    if callable(content):
        content(target)
    else:
        target.write_bytes(content)
    monkeypatch.setenv("KUBECONFIG", str(target))
    result = run(tmp_path, "kubeconfig", "create", "c.yaml", "--merge", "--user", "alice", seconds=BOUND_SECONDS)
    assert_refused(result, 3, "--merge: ", says, "fix or move it")
    assert granted == []


@pytest.mark.parametrize(("variable", "code", "says"), [
    (":", 2, "$KUBECONFIG ':' names no file"),
    ("/dev/zero", 3, "/dev/zero lies inside /dev, a kernel file system"),
    ("/etc/kubesmith-round6-no-such-file", 3, "lies in /etc, a system directory of the OS's own files"),
])
def test_a_kubeconfig_variable_naming_no_file_of_its_own_is_refused(variable: str, code: int, says: str,
                                                                     tmp_path: Path, granted: list[str],
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", variable)
    result = run(tmp_path, "kubeconfig", "create", "c.yaml", "--merge", "--user", "alice", seconds=BOUND_SECONDS)
    assert_refused(result, code, says)
    assert granted == [] and not Path("/etc/kubesmith-round6-no-such-file").exists()


@pytest.mark.parametrize("home", ["", "  "])
def test_a_blank_home_is_no_place_for_the_kubeconfig(home: str, tmp_path: Path, granted: list[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """With $HOME blank, ~/.kube/config was /.kube/config."""
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", home)
    result = run(tmp_path, "kubeconfig", "create", "c.yaml", "--merge", "--user", "alice", seconds=BOUND_SECONDS)
    assert_refused(result, 2, f"$HOME {home!r} is empty")
    assert granted == [] and not Path("/.kube/config").exists()


def test_an_unset_home_still_finds_the_users_kubeconfig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kubesmith.cli.kubeconfig_commands import _merge_target

    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("HOME", raising=False)
    assert _merge_target() == Path(os.path.expanduser("~/.kube/config")) and str(_merge_target()).startswith("/")
    assert not str(_merge_target()).startswith("/.kube")


@pytest.mark.parametrize("existing", ["", "# only a comment\n", "\ufeffapiVersion: v1\nkind: Config\n", None])
def test_a_kubeconfig_merge_into_an_empty_or_missing_file_still_works(existing: str | None, tmp_path: Path,
                                                                       granted: list[str],
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "kube" / "config"
    if existing is not None:
        target.parent.mkdir()
        target.write_text(existing)
    monkeypatch.setenv("KUBECONFIG", f"{target}:{tmp_path / 'second'}")
    result = run(tmp_path, "kubeconfig", "create", "c.yaml", "--merge", "--user", "alice", seconds=BOUND_SECONDS)
    assert result.returncode == 0, result.stderr
    import yaml
    merged = yaml.safe_load(target.read_text())
    assert merged["current-context"] == "alice@single" and granted == ["alice"]
    assert target.stat().st_mode & 0o777 == 0o600


def test_a_kubeconfig_merge_keeps_the_other_entries(tmp_path: Path, granted: list[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "config"
    target.write_text("apiVersion: v1\nkind: Config\nclusters:\n- name: prod\n  cluster: {server: https://p}\n"
                      "users: []\ncontexts: []\ncurrent-context: ''\n")
    monkeypatch.setenv("KUBECONFIG", str(target))
    result = run(tmp_path, "kubeconfig", "create", "c.yaml", "--merge", "--user", "alice", seconds=BOUND_SECONDS)
    assert result.returncode == 0, result.stderr
    import yaml
    merged = yaml.safe_load(target.read_text())
    assert [c["name"] for c in merged["clusters"]] == ["prod", "single"]


@pytest.mark.parametrize(("out", "says"), [
    ("out-dir", "out-dir is a directory, not a file kubesmith may replace"),
    ("fifo", "fifo is a FIFO, not a file kubesmith may replace"),
    ("/dev/stdout", "/dev/stdout lies inside /dev, a kernel file system"),
    ("/etc/alice.conf", "/etc/alice.conf lies in /etc, a system directory of the OS's own files"),
    ("c.yaml/alice.conf", "c.yaml is not a directory"),
    ("etc-link/alice.conf", "lies in /etc, a system directory of the OS's own files"),
])
def test_a_kubeconfig_out_that_is_no_file_is_refused_before_the_grant(out: str, says: str, tmp_path: Path,
                                                                      granted: list[str]) -> None:
    (tmp_path / "out-dir").mkdir()
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "etc-link").symlink_to("/etc")
    result = run(tmp_path, "kubeconfig", "create", "c.yaml", "--out", out, "--user", "alice", seconds=BOUND_SECONDS)
    assert_refused(result, 2, f"--out {out!r}: ", says, "leave --out out to write to standard output")
    assert granted == [] and not Path("/etc/alice.conf").exists()


@pytest.mark.parametrize("out", ["alice.conf", "new/dir/alice.conf", "link.conf"])
def test_a_kubeconfig_out_of_its_own_still_works(out: str, tmp_path: Path, granted: list[str]) -> None:
    """A link is replaced by the file, never written through."""
    (tmp_path / "link.conf").symlink_to("elsewhere.conf")
    result = run(tmp_path, "kubeconfig", "create", "c.yaml", "--out", out, "--user", "alice", seconds=BOUND_SECONDS)
    assert result.returncode == 0, result.stderr
    written = tmp_path / out
    assert not written.is_symlink() and written.stat().st_mode & 0o777 == 0o600
    assert not (tmp_path / "elsewhere.conf").exists()


# ---- etcd snapshot --out ------------------------------------------------------------------------------

@pytest.mark.parametrize(("out", "says"), [
    ("out-dir", "out-dir is a directory"),
    ("/dev/stdout", "/dev/stdout lies inside /dev"),
    ("/etc/snapshot.db", "lies in /etc, a system directory"),
    ("c.yaml/snapshot.db", "c.yaml is not a directory"),
])
def test_a_snapshot_out_that_is_no_file_is_refused_before_any_host(out: str, says: str, tmp_path: Path,
                                                                   no_ssh: list[str]) -> None:
    (tmp_path / "out-dir").mkdir()
    (tmp_path / "kh").write_text("")
    result = run(tmp_path, "etcd", "snapshot", "c.yaml", "--out", out, "--known-hosts", "kh")
    assert_refused(result, 2, f"--out {out!r}: ", says)
    assert no_ssh == []


# ---- SSH files: what SSH will read --------------------------------------------------------------------

def _key(path: Path, passphrase: str = "") -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", passphrase, "-f", str(path)], check=True,
                   capture_output=True)
    return path


def _identity(kind: str, tmp_path: Path) -> Path:
    path = tmp_path / f"id-{kind}"
    if kind == "garbage":
        path.write_bytes(b"\x00\x01 not a key\xff")
    elif kind == "public":
        return Path(f"{_key(tmp_path / 'id-public-pair')}.pub")
    elif kind == "passphrase":
        _key(path, "secret")
    elif kind == "certificate":
        path.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    elif kind == "empty":
        path.write_bytes(b"")
    return path


@pytest.mark.parametrize(("kind", "says"), [
    ("garbage", "not a private key"),
    ("public", "not a private key"),
    ("passphrase", "the key is encrypted with a passphrase"),
    ("certificate", "not a private key"),
    ("empty", "not a private key"),
])
def test_an_identity_that_is_no_private_key_is_one_line(kind: str, says: str, tmp_path: Path) -> None:
    """Was asyncssh's KeyImportError as a traceback, from inside the connection attempt."""
    identity = _identity(kind, tmp_path)
    (tmp_path / "kh").write_text("")
    result = run(tmp_path, "status", "c.yaml", "--state-dir", "state", "--known-hosts", "kh", "--identity",
                 str(identity))
    assert_refused(result, 3, f"identity file {identity}: {says}", "(--identity or spec.ssh)")


def _config(kind: str, tmp_path: Path) -> Path:
    config = tmp_path / "ssh-config"
    lines = {
        "include-itself": f"Include {config}\n",
        "include-cycle": f"Include {tmp_path / 'other-config'}\n",
        "include-kmsg": "Include /proc/kmsg\n",
        "identity-dev-zero": "Host *\n  IdentityFile /dev/zero\n",
        "identity-fifo": f"Host *\n  IdentityFile {tmp_path / 'fifo'}\n",
        "certificate-directory": f"Host *\n  CertificateFile={tmp_path}\n",
        "include-huge": f"Include {tmp_path / 'huge-config'}\n",
    }[kind]
    config.write_text(lines)
    (tmp_path / "other-config").write_text(f"Include {config}\n")
    (tmp_path / "huge-config").write_bytes(b"# " + b"x" * (2 << 20) + b"\n")
    os.mkfifo(tmp_path / "fifo")
    return config


@pytest.mark.parametrize(("kind", "says"), [
    ("include-itself", "which includes it again"),
    ("include-cycle", "which includes it again"),
    ("include-kmsg", "reading it would wait for data"),
    ("identity-dev-zero", "IdentityFile /dev/zero: not a regular file (a character device)"),
    ("identity-fifo", "not a regular file (a FIFO)"),
    ("certificate-directory", "is a directory"),
    ("include-huge", "larger than 1 MiB"),
])
def test_an_ssh_config_ssh_cannot_read_is_one_line(kind: str, says: str, tmp_path: Path) -> None:
    """An Include of itself was a RecursionError traceback; an IdentityFile /dev/zero hung."""
    config = _config(kind, tmp_path)
    (tmp_path / "kh").write_text("")
    result = run(tmp_path, "status", "c.yaml", "--state-dir", "state", "--known-hosts", "kh", "--ssh-config",
                 str(config))
    assert_refused(result, 3, f"SSH config file {config}: ", says, "(--ssh-config or spec.ssh)")


def test_ordinary_ssh_files_pass_the_checks(tmp_path: Path) -> None:
    from kubesmith.transport.ssh import SshOptions

    (tmp_path / "kh").write_text("")
    (tmp_path / "common").write_text("Host *\n  ServerAliveInterval 10\n")
    key = _key(tmp_path / "id")
    config = tmp_path / "config"
    config.write_text(f"Include {tmp_path / 'common'}\nInclude {tmp_path / 'none-*'}\nHost *\n  IdentityFile {key}\n"
                      "  IdentityFile ~/.ssh/id_%u\n  IdentityFile /nonexistent/key\n")
    options = SshOptions(known_hosts=tmp_path / "kh", identity_files=(key,), config_file=config)
    assert options.problem() is None


# ---- image archives: nothing outside the archive ------------------------------------------------------

def _archive(path: Path, extra: tarfile.TarInfo | None, manifest_layer: str = "layer/layer.tar") -> Path:
    manifest = json.dumps([{"Config": "config.json", "RepoTags": ["example/app:1"], "Layers": [manifest_layer]}])
    with tarfile.open(path, "w") as archive:
        for name, data in (("manifest.json", manifest.encode()), ("config.json", b"{}"),
                           (manifest_layer, b"")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
        if extra is not None:
            archive.addfile(extra, io.BytesIO(b"") if extra.isfile() else None)
    return path


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info


ARCHIVES: dict[str, tuple[tarfile.TarInfo | None, str, str]] = {
    "absolute-member": (_member("/etc/cron.d/job"), "layer/layer.tar", "member '/etc/cron.d/job' lies outside"),
    "climbing-member": (None, "../../../etc/shadow", "member '../../../etc/shadow' lies outside"),
    "absolute-symlink": (_member("evil", tarfile.SYMTYPE, "/etc/shadow"), "layer/layer.tar",
                         "link target '/etc/shadow' of 'evil' lies outside"),
    "climbing-hardlink": (_member("h", tarfile.LNKTYPE, "../../etc/passwd"), "layer/layer.tar",
                          "link target '../../etc/passwd' of 'h' lies outside"),
    "climbing-symlink": (_member("layer/up", tarfile.SYMTYPE, "../../x"), "layer/layer.tar",
                         "link target '../../x' of 'layer/up' lies outside"),
    "character-device": (_member("null", tarfile.CHRTYPE), "layer/layer.tar", "member 'null' is a device or FIFO"),
    "fifo-member": (_member("pipe", tarfile.FIFOTYPE), "layer/layer.tar", "member 'pipe' is a device or FIFO"),
}


@pytest.mark.parametrize("case", sorted(ARCHIVES))
def test_an_archive_holding_something_outside_itself_is_refused_before_any_host(case: str, tmp_path: Path,
                                                                               no_ssh: list[str]) -> None:
    extra, layer, says = ARCHIVES[case]
    archive = _archive(tmp_path / "image.tar", extra, layer)
    (tmp_path / "kh").write_text("")
    result = run(tmp_path, "images", "import", "c.yaml", str(archive), "--known-hosts", "kh")
    assert_refused(result, 2, f"{archive}: not an image archive (", says)
    assert no_ssh == []


def test_an_archive_with_links_inside_itself_is_still_an_image(tmp_path: Path) -> None:
    """`docker save` links a repeated layer to the first (`../<id>/layer.tar`)."""
    from kubesmith.images import check_archive

    archive = _archive(tmp_path / "image.tar", _member("layer/again.tar", tarfile.SYMTYPE, "../layer/layer.tar"))
    assert check_archive(archive) == ("example/app:1",)


# ---- kubeconfig --server: the API, over TLS ---------------------------------------------------------

@pytest.mark.parametrize(("server", "says"), [
    ("http://192.0.2.11:6443", "must start with https://"),
    ("ftp://192.0.2.11", "must start with https://"),
    ("https://admin:secret@192.0.2.11:6443", "no user information, query or fragment"),
    ("https://192.0.2.11:6443/?x=1", "no user information, query or fragment"),
    ("https://192.0.2.11:99999", "is not a URL (Port out of range"),
    ("https://", "names no host"),
])
def test_a_kubeconfig_server_that_is_no_https_api_is_refused(server: str, says: str, tmp_path: Path,
                                                            no_ssh: list[str]) -> None:
    """Was tried as given: over http:// whoever answered could claim the binding was made."""
    result = run(tmp_path, "kubeconfig", "create", "c.yaml", "--server", server, "--state-dir", "state",
                 "--out", "alice.conf", "--user", "alice", seconds=BOUND_SECONDS)
    assert_refused(result, 2, f"--server {server!r} ", says)
    assert not (tmp_path / "state").exists() and not (tmp_path / "alice.conf").exists()


def test_an_api_that_does_not_answer_is_one_plain_line(tmp_path: Path) -> None:
    """aiohttp's error carried `ssl:<ssl.SSLContext object at 0x7f...>`."""
    assert run(tmp_path, "render", "c.yaml", "--out-dir", "out", "--state-dir", "state").returncode == 0
    with bounded(SLOW_BOUND):  # no guard: the TLS client's credentials pass through a private temp file
        result = kubesmith("kubeconfig", "create", "c.yaml", "--server", "https://127.0.0.1:1", "--state-dir",
                           "state", "--out", "alice.conf", "--user", "alice", cwd=tmp_path)
    assert_refused(result, 5, "cannot reach the API at https://127.0.0.1:1: ")
    assert "SSLContext" not in result.stderr and " at 0x" not in result.stderr
    assert not (tmp_path / "alice.conf").exists()


# ---- images load --dir (on the nodes) ---------------------------------------------------------------

@pytest.mark.parametrize(("kind", "says"), [("file", "a file, not a directory"), ("fifo", "a FIFO, not a directory")])
def test_images_load_from_a_file_is_one_line(kind: str, says: str, tmp_path: Path) -> None:
    """Was "no image archives in it", exit 0: the unit passed while every archive was elsewhere."""
    target = tmp_path / "images"
    target.write_text("x") if kind == "file" else os.mkfifo(target)
    result = run(tmp_path, "images", "load", "--dir", str(target), "--containerd", f"unix://{tmp_path}/none.sock",
                 "--deadline", "0", seconds=BOUND_SECONDS)
    assert_refused(result, 5, f"{target}: {says}; --dir names the directory of image archives")


def test_images_load_from_a_missing_directory_still_imports_nothing(tmp_path: Path) -> None:
    result = run(tmp_path, "images", "load", "--dir", str(tmp_path / "none"), "--containerd",
                 f"unix://{tmp_path}/none.sock", "--deadline", "0", seconds=BOUND_SECONDS)
    assert result.returncode == 0 and "0 archives imported" in result.stderr, result.stderr


# ---- --binaries DIR: what is there but is no binary ---------------------------------------------------

@pytest.mark.parametrize(("kind", "says"), [
    ("dev-zero-link", "kube-apiserver is there but not a regular file (a character device)"),
    ("fifo", "kube-apiserver is there but not a regular file (a FIFO)"),
    ("directory", "kube-apiserver is there but a directory"),
    ("dangling-link", "kube-apiserver is there but a link to nothing"),
])
def test_a_binary_that_is_no_file_is_named_not_missing(kind: str, says: str, tmp_path: Path) -> None:
    """Was "missing binaries kube-apiserver, ...: pass --binaries DIR", with kube-apiserver in DIR."""
    binaries = tmp_path / "bin"
    binaries.mkdir()
    target = binaries / "kube-apiserver"
    {"dev-zero-link": lambda: target.symlink_to("/dev/zero"), "fifo": lambda: os.mkfifo(target),
     "directory": lambda: target.mkdir(), "dangling-link": lambda: target.symlink_to("gone")}[kind]()
    result = run(tmp_path, "render", "c.yaml", "--out-dir", "out", "--state-dir", "state", "--binaries", "bin")
    assert_refused(result, 2, "missing binaries kube-apiserver", f"bin/{says}")
    assert not (tmp_path / "state").exists() and not (tmp_path / "out").exists()


def test_binaries_given_as_a_fifo_is_not_a_directory(tmp_path: Path) -> None:
    """Was "--binaries bin: no such directory"."""
    os.mkfifo(tmp_path / "bin")
    result = run(tmp_path, "render", "c.yaml", "--out-dir", "out", "--state-dir", "state", "--binaries", "bin")
    assert_refused(result, 3, "--binaries bin: not a directory; give the directory holding the binaries")
