"""SSH transport (asyncssh): strict host-key checking, bounded parallelism, retried connects.

Uploads are atomic on the host: each file goes to a temp name in its target directory,
gets its mode and owner, is fsynced, then renamed over the target — a dropped connection
never leaves a torn file, and a re-run overwrites nothing that did not change.

A connection that drops under a command or an upload raises `HostLost` (the host rebooted,
its sshd stopped); connecting is retried with a bounded backoff (a host that is booting
refuses for a few seconds), always within the options' connect deadline: every attempt's
timeout ends with it. `reach` connects to many hosts at once and names every one that
could not be reached in one error, so a command with several hosts down says so once, soon.

A ProxyCommand from the SSH config runs as a child the transport owns and reaps on `close`:
left to asyncssh, the child is killed when the connection drops and reaped by asyncio's child
watcher after the loop closed, which printed "Unknown child process pid" and "Loop ... that
handles pid ... is closed" on the user's terminal.
"""

from __future__ import annotations

import asyncio
import getpass
import json
import errno
import logging
import os
import secrets
import shlex
import socket
import stat
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import asyncssh
from asyncssh.config import SSHClientConfig
from asyncssh.misc import split_args
from tenacity import (AsyncRetrying, retry_if_exception_type, stop_after_attempt, stop_before_delay,
                      wait_exponential_jitter)

from kubesmith import fsutil
from kubesmith.hostfile import AnyHostFile, StreamedFile

LOG = logging.getLogger("kubesmith.ssh")  # -v (cli/verbosity.py): what is asked of each host


UPLOAD_CONCURRENCY = 16  # files in flight per host: hides round trips, which dominate small files
# AES-GCM first: with AES instructions it encrypts the binaries apply ships about a third faster than
# asyncssh's default ChaCha20-Poly1305 (measured: 117 MB to a lab host, 1.3 s against 1.8 s).
CIPHERS = ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com", "chacha20-poly1305@openssh.com",
           "aes256-ctr", "aes192-ctr", "aes128-ctr")


class TransportError(Exception):
    """A host could not be reached or refused us; the message names the host and the reason."""


class HostKeyMismatch(TransportError):
    pass


class HostUnreachable(TransportError):
    pass


class HostLost(TransportError):
    """The connection dropped under a running operation: the host rebooted or its sshd stopped."""


class HostsUnreachable(TransportError):
    """Hosts `reach` could not connect to, every one of them, by name: (name, address, why)."""

    def __init__(self, failures: Sequence[tuple[str, str, TransportError]], of: int, deadline: float) -> None:
        self.failures = tuple(failures)
        self.names = tuple(name for name, _, _ in failures)
        listed = ", ".join(f"{name} ({address})" for name, address, _ in failures)
        self.summary = (f"cannot reach {len(failures)} of {of} host{'s' if of != 1 else ''} within "
                        f"{deadline:g} s: {listed}")
        self.details = tuple(f"  {name}: {str(exc).removeprefix(f'{address}: ')}" for name, address, exc in failures)
        super().__init__("\n".join((self.summary, *self.details)))


# A dropped connection, as asyncssh reports it under a command, an SFTP transfer or a socket.
_LOST = (asyncssh.DisconnectError, asyncssh.SFTPConnectionLost, ConnectionError, EOFError)
TEMP_MARK = ".kstmp-"  # in the name of an upload's temp file: `.<name>.kstmp-<random>` beside its target
PROXY_EXIT_WAIT = 2.0  # seconds a ProxyCommand gets to exit on its own once its connection closed
STREAM_CHUNK = 1 << 20  # bytes per write of a streamed upload
# A host that vanished without closing its connections (powered off, network gone) is noticed after
# about 30 s of silence rather than never.
KEEPALIVE_INTERVAL, KEEPALIVE_COUNT = 10.0, 3
MIN_ATTEMPT = 0.5  # seconds: a retry with less left before the connect deadline is not started
NOTICE_AFTER = 2.0  # seconds `reach` waits before it says which hosts it still waits for


@dataclass(frozen=True, slots=True)
class SshOptions:
    user: str = "root"
    port: int = 22
    config_file: Path | None = None  # OpenSSH client config (ProxyCommand, per-host settings)
    known_hosts: Path | None = None  # None: ~/.ssh/known_hosts; unknown keys are always refused
    identity_files: tuple[Path, ...] = ()
    connect_timeout: float = 10.0
    connect_attempts: int = 8
    connect_retry_for: float = 30.0  # seconds: a host that reboots refuses connections while it boots
    parallelism: int = 16  # connection attempts at once (never more than max_parallel_hosts)
    max_parallel_hosts: int = 256  # hosts worked on at once where a caller asks for it (`SshTransport.bounded`)

    def known_hosts_file(self) -> Path:
        return self.known_hosts or Path.home() / ".ssh" / "known_hosts"

    @property
    def connect_deadline(self) -> float:
        """Seconds within which a host answers or is named unreachable: the span of its retries, and at
        least one whole attempt."""
        return max(self.connect_retry_for, self.connect_timeout)

    def problem(self) -> str | None:
        """Why no connection can even start (a file these settings name is missing), or None. The
        same for every host: a command says it once instead of once per host and operation."""
        known_hosts = self.known_hosts_file()
        if not known_hosts.exists():
            return (f"known_hosts file {known_hosts} does not exist; kubesmith only talks to hosts whose keys are "
                    "known (give one with --known-hosts or spec.ssh)")
        named = [(known_hosts, "known_hosts file", "--known-hosts"),
                 *((identity, "identity file", "--identity") for identity in self.identity_files)]
        if self.config_file is not None:
            named.append((self.config_file, "SSH config file", "--ssh-config"))
        for path, what, flag in named:
            problem = fsutil.regular_file_problem(path, fsutil.SMALL_FILE_BYTES, f"an {what}" if what[0] in "ai"
                                                  else f"a {what}")
            if problem is None and what == "identity file":
                problem = private_key_problem(path)
            elif problem is None and what == "SSH config file":
                problem = ssh_config_problem(path)
            if problem is not None:
                return f"{what} {path}: {problem} ({flag} or spec.ssh)"
        return None


PASSPHRASE = "the key is encrypted with a passphrase, and kubesmith logs in without one (no agent, no prompt)"
MAX_INCLUDE_DEPTH = 16  # OpenSSH's READCONF_MAX_DEPTH: an Include deeper than this (or of itself) is an error


def private_key_problem(path: Path) -> str | None:
    """Why the identity file `path` (a regular, bounded file) is no private key SSH can log in with, or None:
    asyncssh would fail inside the connection attempt, with its own exception."""
    try:
        asyncssh.import_private_key(_read_small(path, "an identity file"))
    except asyncssh.KeyEncryptionError:
        return PASSPHRASE
    except asyncssh.KeyImportError as exc:
        if "passphrase" in str(exc).lower():
            return PASSPHRASE
        return f"not a private key ({exc}); expected an OpenSSH, PEM or PKCS#8 private key"
    except OSError as exc:
        return str(exc.strerror or exc)
    except (ValueError, TypeError) as exc:  # a malformed key asyncssh's parsers trip over
        return f"not a private key ({exc}); expected an OpenSSH, PEM or PKCS#8 private key"
    return None


def _read_small(path: Path, expected: str) -> bytes:
    """A settings file SSH reads (a key, a config): regular, at most SMALL_FILE_BYTES, never blocking (a FIFO,
    /proc/kmsg); OSError naming it otherwise. Its own reads: uploads count the chunks fsutil streams."""
    if (problem := fsutil.regular_file_problem(path, fsutil.SMALL_FILE_BYTES, expected)) is not None:
        raise OSError(errno.EINVAL, problem, str(path))
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):  # swapped since it was looked at
            raise OSError(errno.EINVAL, f"not a regular file; expected {expected}", str(path))
        data = b""
        while len(data) <= fsutil.SMALL_FILE_BYTES and (chunk := os.read(descriptor, 1 << 16)):
            data += chunk
    except BlockingIOError:
        raise OSError(errno.EAGAIN, "reading it would wait for data (a kernel interface such as /proc/kmsg?); "
                      f"expected {expected}", str(path)) from None
    finally:
        os.close(descriptor)
    if len(data) > fsutil.SMALL_FILE_BYTES:
        raise OSError(errno.EFBIG, f"larger than 1 MiB; expected {expected}", str(path))
    return data


def ssh_config_problem(path: Path, chain: tuple[Path, ...] = ()) -> str | None:
    """Why the OpenSSH client config `path` cannot be read as asyncssh reads it, or None: every file it
    includes (`Include`, globs relative to ~/.ssh, as asyncssh takes them) and every `IdentityFile` or
    `CertificateFile` it names that exists must be a regular file of bounded size, and no Include may
    nest deeper than OpenSSH allows or include a file that includes it (asyncssh recurses until Python's
    stack ends). Nothing but these files is read."""
    try:
        text = _read_small(path, "an SSH config file").decode("utf-8", "replace")
    except OSError as exc:
        return f"{path}: {exc.strerror or exc}" if chain else str(exc.strerror or exc)
    home_ssh = Path("~", ".ssh").expanduser()
    for number, line in enumerate(text.splitlines(), 1):
        words = line.strip().replace("=", " ", 1).split()
        if not words or words[0].startswith("#"):
            continue
        keyword, arguments = words[0].lower(), [word.strip('"') for word in words[1:]]
        where = f"{path}:{number}"
        if keyword == "include":
            for pattern in arguments:
                expanded = Path(pattern).expanduser()
                base, rest = (Path(expanded.anchor), str(Path(*expanded.parts[1:]))) if expanded.anchor \
                    else (home_ssh, pattern)
                try:
                    included = sorted(found for found in base.glob(rest) if found.is_file()) if rest not in ("", ".") \
                        else []
                except (OSError, ValueError) as exc:
                    return f"{where}: Include {pattern!r}: {exc}"
                for found in included:
                    if len(chain) + 1 >= MAX_INCLUDE_DEPTH or found.resolve() in {p.resolve() for p in (*chain, path)}:
                        return (f"{where}: Include {pattern!r} includes {found}, which includes it again (or the "
                                f"includes nest deeper than {MAX_INCLUDE_DEPTH}, OpenSSH's limit)")
                    if (problem := ssh_config_problem(found, (*chain, path))) is not None:
                        return problem if problem.startswith(f"{found}") else f"{where}: {problem}"
        elif keyword in ("identityfile", "certificatefile"):
            for value in arguments:
                named = Path(value).expanduser()
                if "%" in value or value.lower() == "none" or not os.path.lexists(named):
                    continue  # a token expanded per host, or missing: ssh skips a missing identity
                expected = "an identity file" if keyword == "identityfile" else "a certificate file"
                if (problem := fsutil.regular_file_problem(named, fsutil.SMALL_FILE_BYTES, expected)) is not None:
                    return f"{where}: {words[0]} {value}: {problem}"
    return None


@dataclass(frozen=True, slots=True)
class CommandResult:
    host: str
    command: str
    exit_status: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_status == 0


@dataclass(slots=True)
class SshTransport:
    """One connection per host, opened on first use and shared by every operation on it."""

    options: SshOptions
    _attempts: dict[str, asyncio.Task[asyncssh.SSHClientConnection]] = field(default_factory=dict)  # opened or opening
    _slots: asyncio.Semaphore | None = None  # connection attempts
    _hosts: asyncio.Semaphore | None = None  # hosts in a `bounded` step
    _holding: dict[str, int] = field(default_factory=dict)  # host: its `bounded` steps in progress
    _proxies: list[subprocess.Popen[bytes]] = field(default_factory=list)  # ProxyCommand children, reaped on close

    async def __aenter__(self) -> SshTransport:
        self._slots = asyncio.Semaphore(min(self.options.parallelism, self.options.max_parallel_hosts))
        self._hosts = asyncio.Semaphore(self.options.max_parallel_hosts)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close every connection, first letting attempts still in flight finish (see `_connection`)."""
        attempts = list(self._attempts.values())
        self._attempts.clear()
        if attempts:
            await asyncio.wait(attempts)
        connections = [task.result() for task in attempts if not task.cancelled() and task.exception() is None]
        for connection in connections:
            connection.close()
        await asyncio.gather(*(c.wait_closed() for c in connections), return_exceptions=True)
        proxies, self._proxies = self._proxies, []
        await asyncio.gather(*(asyncio.to_thread(_reap, proxy) for proxy in proxies))

    async def reach(self, hosts: Mapping[str, str], notify: Callable[[str], None] | None = None) -> None:
        """Connect to every host (name: address) at once, each within the connect deadline; raise
        HostsUnreachable naming every host that could not be reached (down, refusing, key not trusted,
        login refused), so the operator hears of all of them together rather than of one after the
        others' retries. `notify` hears, once, which hosts have not answered after a moment."""
        attempts = {name: asyncio.ensure_future(self._connection(address)) for name, address in hosts.items()}
        if not attempts:
            return
        _, slow = await asyncio.wait(attempts.values(), timeout=NOTICE_AFTER)
        if slow and notify is not None:
            waiting = [name for name, task in attempts.items() if task in slow]
            notify(f"waiting for {', '.join(waiting)} to answer (up to {self.options.connect_deadline:g} s)")
        await asyncio.wait(attempts.values())
        failures = [(name, hosts[name], task.exception()) for name, task in attempts.items()
                    if task.exception() is not None]
        unexpected = [exc for _, _, exc in failures if not isinstance(exc, TransportError)]
        if unexpected:
            raise unexpected[0]  # a bug, not a host: as it is
        if failures:
            raise HostsUnreachable(failures, len(hosts), self.options.connect_deadline)  # type: ignore[arg-type]

    @asynccontextmanager
    async def bounded(self, host: str) -> AsyncIterator[None]:
        """Hold one of `max_parallel_hosts` slots for `host` while a heavy step works on it (inspect,
        upload), so this machine's CPU, memory and link serve a bounded number of hosts at once. A host
        already holding one enters again at once (a step inside a step never waits for itself). Never
        around anything that waits for another host (a start that needs etcd's quorum): with fewer
        slots than hosts, the hosts holding them would wait for hosts that never get one."""
        assert self._hosts is not None, "use SshTransport as an async context manager"
        if not self._holding.get(host):
            await self._hosts.acquire()
            if self._holding.get(host):  # another step of the host got a slot meanwhile: one is enough
                self._hosts.release()
        self._holding[host] = self._holding.get(host, 0) + 1
        try:
            yield
        finally:
            self._holding[host] -= 1
            if not self._holding[host]:  # the host's last step ended: its slot goes to a waiting host
                del self._holding[host]
                self._hosts.release()

    async def run(self, host: str, command: str | Sequence[str], input: str | None = None,
                  timeout: float | None = 120.0) -> CommandResult:
        text = command if isinstance(command, str) else shlex.join(command)
        connection = await self._connection(host)
        started = time.monotonic()
        try:
            result = await asyncio.wait_for(connection.run(text, input=input, check=False), timeout)
        except asyncio.TimeoutError:
            raise TransportError(f"{host}: command timed out after {timeout:g}s: {text}") from None
        except (OSError, asyncssh.Error) as exc:
            raise HostLost(f"{host}: connection lost while running {text[:80]!r}: {exc}") from None
        if result.exit_status is None and result.exit_signal is None:  # the channel closed without an answer
            raise HostLost(f"{host}: connection lost while running {text[:80]!r}")
        status = result.exit_status if result.exit_status is not None else 255
        _log_command(host, text, status, time.monotonic() - started)
        return CommandResult(host, text, status, str(result.stdout or ""), str(result.stderr or ""))

    async def upload(self, host: str, files: Sequence[AnyHostFile],
                     staged: Callable[[], Awaitable[None]] | None = None) -> None:
        """Place every file atomically; directories are created as needed (0755, root). `staged`
        runs once every temp file is written, before any rename (a test's pause point)."""
        if not files:
            return
        connection = await self._connection(host)
        directories = sorted({str(Path(f.path).parent) for f in files})
        await self._checked(host, "mkdir -p -- " + " ".join(shlex.quote(d) for d in directories))
        suffix = f"{TEMP_MARK}{secrets.token_hex(4)}"
        temps = [(f, f"{Path(f.path).parent}/.{Path(f.path).name}{suffix}") for f in files]
        try:
            async with connection.start_sftp_client() as sftp:
                slots = asyncio.Semaphore(UPLOAD_CONCURRENCY)

                async def put(file: AnyHostFile, temp: str) -> None:
                    async with slots, sftp.open(temp, "wb", asyncssh.SFTPAttrs(permissions=file.mode)) as handle:
                        if isinstance(file, StreamedFile):
                            await _stream(file, handle)
                        else:
                            await handle.write(file.data)

                await asyncio.gather(*(put(file, temp) for file, temp in temps))
        except _LOST as exc:
            raise HostLost(f"{host}: connection lost during the upload: {exc}") from None
        except (OSError, asyncssh.Error) as exc:
            raise TransportError(f"{host}: upload failed: {exc}") from None
        if staged is not None:
            await staged()
        script = [f"chmod {file.mode:o} {shlex.quote(temp)} && chown {shlex.quote(file.owner)}:"
                  f"{shlex.quote(file.group)} {shlex.quote(temp)}" for file, temp in temps]
        script.append("sync")  # data of every temp file is durable before any rename
        script += [f"mv -f -- {shlex.quote(temp)} {shlex.quote(file.path)}" for file, temp in temps]
        await self._checked(host, " && ".join(script))
        if LOG.isEnabledFor(logging.INFO):  # an apply uploads thousands of files: no list unless -v
            LOG.info("%s: uploaded %d files: %s", host, len(files), _listed([file.path for file in files]))

    async def host_key(self, host: str) -> str:
        """The host key this transport checked `host` against, as one OpenSSH public key line
        (`ssh-ed25519 AAAA...`): what another host is told to expect of it."""
        connection = await self._connection(host)
        key = connection.get_server_host_key()
        if key is None:  # pragma: no cover - asyncssh always has one once connected with known_hosts
            raise TransportError(f"{host}: no host key")
        return " ".join(key.export_public_key("openssh").decode().split()[:2])

    async def stale_temps(self, host: str, directories: Sequence[str]) -> list[str]:
        """Temp files an interrupted upload left in these directories (a later apply removes them)."""
        if not directories:
            return []
        quoted = " ".join(shlex.quote(d) for d in sorted(set(directories)))
        result = await self.run(host, f"find {quoted} -maxdepth 1 -name {shlex.quote('.*' + TEMP_MARK + '*')} "
                                      "2>/dev/null; true")
        return sorted(line for line in result.stdout.splitlines() if line.strip())

    async def read(self, host: str, paths: Sequence[str]) -> dict[str, bytes | None]:
        """The contents of files on the host; None where a file does not exist or cannot be read."""
        connection = await self._connection(host)
        found: dict[str, bytes | None] = {}
        try:
            async with connection.start_sftp_client() as sftp:
                for path in paths:
                    try:
                        async with sftp.open(path, "rb") as handle:
                            found[path] = await handle.read()
                    except asyncssh.SFTPError:
                        found[path] = None
        except _LOST as exc:
            raise HostLost(f"{host}: connection lost while reading files: {exc}") from None
        except (OSError, asyncssh.Error) as exc:
            raise TransportError(f"{host}: reading files failed: {exc}") from None
        return found

    async def hashes(self, host: str, paths: Sequence[str], cache: str | None = None) -> dict[str, str | None]:
        """sha256 of each regular file at `paths` on the host; None where there is none. With `cache` (a
        file on the host), a file whose size, mtime, ctime and inode are those of its last hashing is not
        read again, as git's index does: any write or rename changes its ctime, which no one can set."""
        if not paths:
            return {}
        argv = ["python3", "-c", HASH_SCRIPT, cache or "", *paths]
        result = await self.run(host, shlex.join(argv))
        if not result.ok:
            raise TransportError(f"{host}: hashing files failed ({result.exit_status}): {result.stderr.strip()[-400:]}")
        found = json.loads(result.stdout)
        return {path: found.get(path) for path in paths}

    async def _checked(self, host: str, command: str) -> CommandResult:
        result = await self.run(host, command)
        if not result.ok:
            raise TransportError(f"{host}: `{command[:120]}` failed ({result.exit_status}): "
                                 f"{result.stderr.strip()[-400:]}")
        return result

    async def _connection(self, host: str) -> asyncssh.SSHClientConnection:
        """The host's connection, opened once by a task the transport owns; callers wait shielded.

        An attempt is never cancelled half-way: on Python 3.11 cancelling asyncio's subprocess_exec
        while it connects the pipes (asyncssh's ProxyCommand) leaves the cancelled task waiting
        forever, so one failed host would hang the whole run. `close` awaits the attempts instead.
        """
        attempt = self._attempts.get(host)
        if attempt is None:
            attempt = self._attempts[host] = asyncio.get_running_loop().create_task(self._connect(host))
            attempt.add_done_callback(lambda task: self._forget_failed(host, task))
        return await asyncio.shield(attempt)

    def _forget_failed(self, host: str, attempt: asyncio.Task[asyncssh.SSHClientConnection]) -> None:
        """A failed attempt is not cached: the next operation on the host tries again."""
        if (attempt.cancelled() or attempt.exception() is not None) and self._attempts.get(host) is attempt:
            del self._attempts[host]

    async def _connect(self, host: str) -> asyncssh.SSHClientConnection:
        """Connect, retrying a host that refuses or does not answer (with backoff) until the attempts or
        the connect deadline run out; every attempt's timeout ends at the deadline, so a host is named
        unreachable within it, however its attempts fail. A slot is held per attempt, not across waits."""
        assert self._slots is not None, "use SshTransport as an async context manager"
        opts = self.options
        clock = asyncio.get_running_loop().time
        end = clock() + opts.connect_deadline
        attempts = opts.connect_attempts if opts.connect_retry_for > 0 else 1
        retrying = AsyncRetrying(
            stop=stop_after_attempt(attempts) | stop_before_delay(opts.connect_deadline - MIN_ATTEMPT),
            wait=wait_exponential_jitter(multiplier=0.5, max=5, jitter=1),
            retry=retry_if_exception_type(HostUnreachable),
            reraise=True,
        )
        started = clock()
        async for attempt in retrying:
            with attempt:
                async with self._slots:
                    connection = await self._connect_once(host, max(min(opts.connect_timeout, end - clock()),
                                                                    MIN_ATTEMPT))
                LOG.info("%s: connected in %.1fs (attempt %d)", host, clock() - started,
                         attempt.retry_state.attempt_number)
                return connection
        raise AssertionError("unreachable")  # pragma: no cover

    async def _connect_once(self, host: str, timeout: float) -> asyncssh.SSHClientConnection:
        opts = self.options
        known_hosts = str(opts.known_hosts_file())
        problem = opts.problem()
        if problem is not None:
            raise TransportError(f"{host}: {problem}")
        sock = self._proxy(host)
        try:
            return await asyncssh.connect(
                host, port=opts.port, username=opts.user, sock=sock,
                config=[str(opts.config_file)] if opts.config_file else (),
                known_hosts=known_hosts,
                client_keys=[str(p) for p in opts.identity_files] or (),
                connect_timeout=timeout,
                keepalive_interval=KEEPALIVE_INTERVAL, keepalive_count_max=KEEPALIVE_COUNT,
                encryption_algs=CIPHERS,
                agent_path=None,
                password=None,
                kbdint_auth=False,
            )
        except BaseException as exc:
            if sock is not None:
                sock.close()  # the proxy sees EOF and exits; close() reaps it
            raise _connect_error(host, opts, known_hosts, exc, timeout) from None

    def _proxy(self, host: str) -> socket.socket | None:
        """The SSH config's ProxyCommand for `host` started on one end of a socket pair (None: connect
        directly). The transport reaps it in `close`, so it never outlives the event loop."""
        if self.options.config_file is None:
            return None
        config = SSHClientConfig.load(None, [str(self.options.config_file)], False, False, False,
                                      getpass.getuser(), self.options.user, host, self.options.port)
        command = config.get("ProxyCommand")
        if not isinstance(command, str) or command.lower() == "none":
            return None
        ours, theirs = socket.socketpair()
        with theirs:
            try:
                self._proxies.append(subprocess.Popen(split_args(command), stdin=theirs, stdout=theirs,
                                                      start_new_session=True))
            except OSError as exc:
                ours.close()
                raise TransportError(f"{host}: ProxyCommand {command!r} did not start: {exc}") from None
        return ours


async def _stream(file: StreamedFile, handle: asyncssh.SFTPClientFile) -> None:
    """Copy a local file to an open remote one in chunks (bounded memory, whatever its size)."""
    with fsutil.open_regular(file.source, file.limit, "a file to upload") as source:
        while chunk := source.read(STREAM_CHUNK):
            await handle.write(chunk)


HASH_SCRIPT = r"""
import glob, hashlib, json, os, stat, sys, time
cache_path, paths = sys.argv[1], sys.argv[2:]
# racy entries (as git's index): a file changed within a timestamp's granularity of its hashing can change
# again keeping its size and times; an entry counts only when the file's last change came a second before
started, granularity = time.time_ns(), 10 ** 9
try:
    with open(cache_path) as handle:
        cache = json.load(handle)
except (OSError, ValueError):
    cache = {}
found, fresh = {}, {}
for path in paths:
    try:
        info = os.stat(path)
    except OSError:
        continue
    if not stat.S_ISREG(info.st_mode):
        continue
    key = [info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino, info.st_dev]
    entry = cache.get(path) if isinstance(cache, dict) else None
    if isinstance(entry, list) and len(entry) == 7 and entry[:5] == key and isinstance(entry[6], int) \
            and info.st_ctime_ns < entry[6] - granularity:
        digest, hashed = entry[5], entry[6]  # kept as it was: an unchanged cache is not written again
    else:
        hashed = started
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
        digest = digest.hexdigest()
    found[path] = digest
    fresh[path] = key + [digest, hashed]
def gone(temp):  # a temp whose writer (the pid in its name) was killed before its rename
    try:
        os.kill(int(temp.rsplit("-", 1)[1]), 0)
    except (ValueError, ProcessLookupError):
        return True
    except OSError:
        pass
    return False
if cache_path:
    directory, name = os.path.split(cache_path)
    for stale in filter(gone, glob.glob(os.path.join(glob.escape(directory), "." + glob.escape(name) + ".kstmp-*"))):
        try:
            os.remove(stale)
        except OSError:
            pass
    if fresh != cache:
        temp = os.path.join(directory, "." + name + ".kstmp-%d" % os.getpid())
        try:
            os.makedirs(directory, exist_ok=True)
            with open(temp, "w") as handle:
                json.dump(fresh, handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temp, cache_path)
        except OSError:
            pass
print(json.dumps(found))
"""


def _connect_error(host: str, opts: SshOptions, known_hosts: str, exc: BaseException, timeout: float) -> BaseException:
    """What a failed connect means for the user (anything unexpected stays as it is)."""
    if isinstance(exc, asyncssh.HostKeyNotVerifiable):
        return HostKeyMismatch(f"{host}: host key not trusted ({exc.reason}); check {known_hosts}")
    if isinstance(exc, asyncssh.PermissionDenied):
        return TransportError(f"{host}: SSH authentication failed for user {opts.user}")
    if isinstance(exc, (OSError, asyncio.TimeoutError, asyncssh.ConnectionLost, asyncssh.DisconnectError)):
        reason = (f"no answer within {timeout:.3g} s" if isinstance(exc, asyncio.TimeoutError)
                  else str(exc) or type(exc).__name__)
        return HostUnreachable(f"{host}: cannot connect on port {opts.port}: {reason}")
    return exc


def _reap(proxy: subprocess.Popen[bytes]) -> None:
    """Wait for a ProxyCommand that saw its connection close; end it if it does not exit by itself."""
    try:
        proxy.wait(PROXY_EXIT_WAIT)
    except subprocess.TimeoutExpired:
        proxy.terminate()
        try:
            proxy.wait(PROXY_EXIT_WAIT)
        except subprocess.TimeoutExpired:
            proxy.kill()
            proxy.wait()


def _log_command(host: str, text: str, status: int, seconds: float) -> None:
    """-v: the command's first line (a script's is its first step); -vv: all of it."""
    if LOG.isEnabledFor(logging.DEBUG):
        LOG.debug("%s: exit %d in %.2fs: %s", host, status, seconds, text)
    elif LOG.isEnabledFor(logging.INFO):
        first = text.splitlines()[0] if text else ""
        LOG.info("%s: exit %d in %.2fs: %s", host, status, seconds, first if len(first) <= 160 else first[:157] + "...")


def _listed(paths: Sequence[str], most: int = 5) -> str:
    shown = ", ".join(paths[:most])
    return shown + (f" and {len(paths) - most} more" if len(paths) > most else "")


def new_key_pair() -> tuple[bytes, str]:
    """A fresh ed25519 key pair: the private key (OpenSSH format) and the public key line."""
    key = asyncssh.generate_private_key("ssh-ed25519")
    return key.export_private_key("openssh"), " ".join(key.export_public_key("openssh").decode().split()[:2])
