"""Exit codes shared by every command, so scripts can tell failures apart (README "Exit codes").

The same failure gets the same code whichever command meets it: an input the command line names
that cannot serve (missing binaries, another cluster's --state-dir) is USAGE, nothing running is
UNHEALTHY (`status`, `lab status`), a settings file that is missing is IO_ERROR, and so is a file
the SSH settings name (known_hosts, identity, ssh_config) in every command that reaches hosts
(`cli.common.require_ssh_files`), before any host is tried."""

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    INVALID_SPEC = 1  # the cluster file has errors (all of them are printed)
    USAGE = 2  # bad command line (unknown option or host, missing argument or binaries, another cluster's state)
    IO_ERROR = 3  # a file could not be read or written
    UNHEALTHY = 4  # status/wait/lab status: something is not healthy, not running or not ready in time
    FAILED = 5  # an operation on hosts failed (apply, run, join, ...)
    PREFLIGHT = 6  # a host is not fit for its part (preflight); nothing was changed


class UsageError(ValueError):
    """An input the command line or its environment names that cannot serve, met below the CLI (which
    raises click's own): one line and exit USAGE, as a bad flag gets."""
