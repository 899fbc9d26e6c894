"""The log of the long-running commands (sync --watch, cri-proxy): one line per event on stderr."""

from __future__ import annotations

import json
import sys
import time
from typing import Any, TextIO

from pinctl.display import visible


class Log:
    """One line per action on stderr: readable text, or JSON for log shippers."""

    def __init__(self, fmt: str, stream: TextIO = sys.stderr) -> None:
        self.fmt = fmt
        self.stream = stream

    def __call__(self, level: str, message: str, **fields: Any) -> None:
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        if self.fmt == "json":
            line = json.dumps({"time": now, "level": level, "msg": message, **fields}, sort_keys=True)
        else:
            # Names come from containerd and may hold a newline or an ESC: one line, nothing the terminal obeys.
            encoding = getattr(self.stream, "encoding", None)
            extra = " ".join(f"{k}={visible(str(v), encoding)}" for k, v in sorted(fields.items()))
            line = f"{now} {level} {visible(message, encoding)}" + (f" ({extra})" if extra else "")
        self.stream.write(line + "\n")
        self.stream.flush()
