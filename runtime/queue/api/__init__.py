"""The API an application holds, apart from the Redis boundary it drives.

`client.Client` (with `client.Site`, a sharded site's), `aclient.AsyncClient`,
`queues.Queue`, the parts `admin`, `scheduling` and `holder` (`client.leases`,
the `Lease` handle), the site's parts (`siteparts`) and `batches`; public
through runtime/__init__.py. The boundary these drive (ops, scripts, the
drivers, faults, keys, Lua) is runtime.queue; docs/design.md draws the map.
"""
