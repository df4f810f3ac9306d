"""systemd's notify protocol (sd_notify): READY, STATUS, WATCHDOG, STOPPING.

A datagram to $NOTIFY_SOCKET (a path, or '@' for the abstract namespace),
sent without blocking. Without NOTIFY_SOCKET every call does nothing.
"""

from __future__ import annotations

import logging
import os
import socket

log = logging.getLogger(__name__)


class Notifier:
    def __init__(self, environ: dict[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        address = env.get("NOTIFY_SOCKET")
        self.address = "\0" + address[1:] if address and address.startswith("@") else address
        usec = env.get("WATCHDOG_USEC")
        pid = env.get("WATCHDOG_PID")
        watched = usec and usec.isdigit() and (not pid or pid == str(os.getpid()))
        self.watchdog_s = int(usec) / 1e6 if watched and usec else None

    @property
    def enabled(self) -> bool:
        return bool(self.address)

    def send(self, **fields: str) -> None:
        if not self.address:
            return
        message = "\n".join(f"{k.upper()}={v}" for k, v in fields.items()).encode()
        try:  # never block the master on a slow reader: drop the message instead
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
                sock.sendto(message, socket.MSG_DONTWAIT, self.address)
        except BlockingIOError:
            log.debug("systemd notify dropped (the socket is full)")
        except OSError as err:
            log.warning("systemd notify failed: %s", err)

    def ready(self, status: str) -> None:
        self.send(ready="1", status=status, mainpid=str(os.getpid()))

    def status(self, status: str) -> None:
        self.send(status=status)

    def watchdog(self) -> None:
        self.send(watchdog="1")

    def stopping(self, status: str) -> None:
        self.send(stopping="1", status=status)
