"""Exit codes shared by every command, so scripts can tell failures apart."""

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    INVALID_SPEC = 1  # the cluster file has errors (all of them are printed)
    USAGE = 2  # bad command line (unknown option, missing argument)
    IO_ERROR = 3  # a file could not be read or written
    UNHEALTHY = 4  # status/wait: something is not healthy or not ready in time
    FAILED = 5  # an operation on hosts failed (apply, run, join, ...)
    PREFLIGHT = 6  # a host is not fit for its part (preflight); nothing was changed
