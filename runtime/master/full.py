"""What a master does when Redis is full (maxmemory reached with noeviction: the
`oom` condition): before it waits for room, it deletes what retention lets go,
completed jobs past jobs-history or beyond jobs-history-count (retention.lua,
allowed while Redis is full), so a Redis filled by finished work frees itself
without an operator. See docs/redis.md, *When Redis is full*."""

from __future__ import annotations

import logging

from runtime import config
from runtime.errors import Error
from runtime.queue.aio import MasterClient

log = logging.getLogger(__name__)

TRIM_BATCHES = 20  # most retention batches deleted each time oom is met


async def trim(client: MasterClient, worker_id: str) -> None:
    """Deletes completed jobs past retention, a batch at a time until a batch
    comes back short (nothing more to let go) or TRIM_BATCHES were deleted;
    a failure ends it quietly: the master's backoff goes on, and the
    next oom met trims again."""
    batch = config.LIMITS["retention_batch"]
    deleted = 0
    for _ in range(TRIM_BATCHES):
        try:
            done = await client.trim_retention(batch)
        except Error as err:
            log.debug("Redis is full; could not trim retention: %s worker=%s", err, worker_id)
            break
        deleted += done
        if done < batch:
            break
    if deleted:
        log.warning(
            "Redis is full (oom): deleted %d completed jobs past retention "
            "(jobs-history, jobs-history-count) worker=%s",
            deleted,
            worker_id,
        )
