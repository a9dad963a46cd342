"""Who connected each of this process's sockets, for a test that failed on an unclosed one.

A socket left unclosed is found only when the garbage collector frees it, often in a later test (the session
service's quiet collector makes the full collections), and its ResourceWarning names nothing but its ports. With
`CLASSROOM_TEST_TRACE_SOCKETS=1` every connect of this process records its stack by local port, and a failed
test's report gains the stack of each port its failure names (tests/conftest.py). Off by default: a stack a
connection is a cost the suite does not need.
"""

import os
import re
import socket
import traceback
from typing import Any

ENV = "CLASSROOM_TEST_TRACE_SOCKETS"
# The local port as socket's repr writes it: laddr=('127.0.0.1', 49954)
LOCAL_PORT = re.compile(r"laddr=\('[^']*', (\d+)\)")
STACK_LIMIT = 30
# pytest's and pluggy's own frames, the same at every connect
HARNESS = re.compile(r"/(_pytest|pluggy)/")

_makers: dict[int, str] = {}


def trace_connects() -> bool:
    """Record every connect's stack from now on, if the environment asks; True if it does."""
    if not os.environ.get(ENV):
        return False
    connect = socket.socket.connect

    def traced(self: socket.socket, address: Any) -> None:
        try:
            connect(self, address)
        finally:  # a non-blocking connect (asyncio's) raises BlockingIOError with its port already bound
            if self.family in (socket.AF_INET, socket.AF_INET6):  # a Unix socket has no port
                try:
                    port = self.getsockname()[1]
                except OSError:
                    port = None
                if port is not None:
                    frames = [f for f in traceback.extract_stack()[:-1] if not HARNESS.search(f.filename)]
                    _makers[port] = "".join(traceback.format_list(frames[-STACK_LIMIT:]))

    socket.socket.connect = traced  # type: ignore[method-assign,assignment]
    return True


def makers_named_in(text: str) -> str:
    """The recorded stacks of the local ports `text` names."""
    found = []
    for port in dict.fromkeys(int(p) for p in LOCAL_PORT.findall(text)):
        found.append(f"local port {port}:\n{_makers.get(port, '(no connect recorded)')}")
    return "\n".join(found)
