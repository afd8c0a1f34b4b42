"""Errors a user can fix, told apart from bugs at the command-line boundary.

``coevo`` prints a user error as one line, ``coevo <command>: <message>``, and exits 2; any
other exception is a bug and keeps its traceback. This module imports nothing from the project,
so every package can derive its own error types from :class:`UserError`.
"""

from __future__ import annotations

# A missing, misnamed or already-taken path the user typed. Other OSErrors (a full disk, a dead
# socket) are not the user's input and keep their traceback.
PATH_ERRORS: tuple[type[OSError], ...] = (
    FileNotFoundError,
    FileExistsError,
    NotADirectoryError,
    IsADirectoryError,
)


class UserError(Exception):
    """Bad input from the user: a config key or value, a path, a run directory, a model.

    Subclasses may also derive from a builtin (``class ConfigError(UserError, ValueError)``)
    so that existing ``except ValueError`` callers keep working. The message must stand on its
    own on one line and name what to fix (file, key, field).
    """


def user_message(exc: BaseException) -> str | None:
    """The one-line message for ``exc`` if it is a user error, else None (a bug).

    User errors are :class:`UserError` subclasses and the path errors in ``PATH_ERRORS``; an
    ``OSError`` raised by the OS (with ``filename`` set) reads ``"<reason>: <path>"``.
    """
    if isinstance(exc, UserError):
        msg = str(exc)
    elif isinstance(exc, PATH_ERRORS):
        if exc.filename is not None and exc.strerror:
            msg = f"{exc.strerror}: {exc.filename}"
        else:
            msg = str(exc)
    else:
        return None
    return " ".join(msg.split()) or type(exc).__name__
