"""The one exception type for mistakes a user can fix."""


class IreetuneError(Exception):
    """A user-facing error: bad input, unsupported op, unknown target.

    The command line prints its message as one line on stderr and exits non-zero. Internal
    invariants use assertions instead, so a traceback always means a bug in ireetune.
    """
