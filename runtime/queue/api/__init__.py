"""The API an application holds, apart from the Redis layer it drives.

`aclient.AsyncClient` (public as `runtime.AsyncClient`) lives here; the
synchronous `Client`, its queues and the site will join it (issue 32). The
boundary these drive (ops, scripts, drivers, faults, keys, Lua) stays in
runtime.queue.
"""
