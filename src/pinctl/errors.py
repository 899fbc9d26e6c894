"""The one exception hierarchy. Each error carries its exit code; cli.main maps them to exits."""

from __future__ import annotations

from pinctl.model import STATUS_ERROR, STATUS_PARTIAL, STATUS_SUCCESS, Status

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_PARTIAL = 3
# 128 + SIGINT: what a shell reports for a command stopped by ^C (pull and import say so too).
EXIT_INTERRUPTED = 130
# 128 + SIGPIPE: what a shell reports for a writer whose reader went away (| head).
EXIT_PIPE = 141


def batch_exit_code(interrupted: bool, all_ok: bool, all_failed: bool) -> int:
    """A batch of items (pull's references, import's archives): interrupted wins, since what was
    not reached is not known; then every item as asked, every item failed, or some of each."""
    if interrupted:
        return EXIT_INTERRUPTED
    if all_ok:
        return EXIT_OK
    return EXIT_ERROR if all_failed else EXIT_PARTIAL


def batch_status(exit_code: int) -> Status:
    """The JSON envelope's status for a batch's exit code: an interrupted batch is partial."""
    statuses: dict[int, Status] = {EXIT_OK: STATUS_SUCCESS, EXIT_ERROR: STATUS_ERROR}
    return statuses.get(exit_code, STATUS_PARTIAL)


class PinctlError(Exception):
    """An error shown to the operator as one line: what went wrong and how to fix it."""

    exit_code = EXIT_ERROR

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class UsageError(PinctlError):
    """The command line asks for something that cannot be meant: a malformed ref, a bad value."""

    exit_code = EXIT_USAGE


class ConfigError(PinctlError):
    """A configuration file or setting is invalid."""

    exit_code = EXIT_USAGE


class UnknownNamespace(UsageError):
    """A namespace named with -n does not exist on the daemon."""


class EngineError(PinctlError):
    """The engine could not be reached or refused the request."""


class EngineUnreachable(EngineError):
    """No daemon answers at the address: missing socket, permissions, timeout."""


class RelayFailed(PinctlError):
    """cri-proxy's compiled relay did not start serving."""


class ImageNotFound(PinctlError):
    """No image matches a ref in the selected namespaces."""


class AmbiguousRef(PinctlError):
    """An ID prefix matches more than one image."""


class PatternError(ConfigError):
    """A pinned-image pattern that cannot be used."""


class OutputClosed(PinctlError):
    """The reader of stdout or stderr went away (| head): end quietly, as a writer killed by SIGPIPE."""

    exit_code = EXIT_PIPE

    def __init__(self, fd: int) -> None:
        super().__init__("the output pipe was closed by its reader")
        self.fd = fd


class OutputError(PinctlError):
    """stdout or stderr cannot be written: a full disk, a device error."""

    def __init__(self, fd: int, reason: str) -> None:
        super().__init__(f"cannot write {'output' if fd == 1 else 'diagnostics'}: {reason}")
        self.fd = fd
