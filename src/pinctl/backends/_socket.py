"""Local socket checks shared by every backend: one clear line before a client library
turns a missing file or a permission problem into a vague timeout."""

from __future__ import annotations

import os
import stat

from pinctl.errors import EngineUnreachable, UsageError


def check_socket(path: str, what: str, flag: str) -> None:
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise EngineUnreachable(
            f"{what} socket {path} does not exist",
            f"is {what} running? point {flag} at its socket",
        ) from None
    except PermissionError:
        raise EngineUnreachable(
            f"permission denied reaching {what} socket {path}", "run pinctl as root (sudo)"
        ) from None
    except OSError as err:
        # A symlink loop, a name too long, a file where a directory should be: the path is wrong.
        reason = err.strerror or str(err)
        raise UsageError(
            f"cannot use {what} socket {path}: {reason[:1].lower()}{reason[1:]}", f"point {flag} at {what}'s socket"
        ) from None
    if not stat.S_ISSOCK(mode):
        raise EngineUnreachable(f"{path} is not a socket", f"point {flag} at {what}'s socket")
    if not os.access(path, os.R_OK | os.W_OK):
        raise EngineUnreachable(
            f"permission denied on {what} socket {path}", "run pinctl as root (sudo)"
        )
