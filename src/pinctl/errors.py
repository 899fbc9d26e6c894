"""The one exception hierarchy. Each error carries its exit code; cli.main maps them to exits."""

from __future__ import annotations

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_PARTIAL = 3
# 128 + SIGPIPE: what a shell reports for a writer whose reader went away (| head).
EXIT_PIPE = 141


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
