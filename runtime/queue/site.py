"""The sharded site's client, by its old place: `Site` and `SiteQueue` live in
runtime.queue.client (a site's client is a `Client`: `Client(shards=...)`)."""

from __future__ import annotations

from runtime.queue.client import Site, SiteQueue, member_settings

__all__ = ["Site", "SiteQueue", "member_settings"]
