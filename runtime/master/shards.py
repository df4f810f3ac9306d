"""One `runtime worker` over the queues of several namespaces (a sharded site,
runtime.queue.shards): one master serving them all.

The worker's queues are split by the site's rule into shards, (namespace, its
queues), in the rule's order. Queues of one namespace make one ordinary master
of that namespace, exactly as without a rule. Queues of several make one master
with a shard for each namespace (book.py, master.py): one loop, one fork server,
one set of children whose concurrency the namespaces share, and for each
namespace its own Redis client, registration (under the same worker id),
exchanges, renewals, blocking read for work and cancels. Every job is renewed
and reported in the namespace it came from; a namespace whose Redis is out of
reach stops leasing and fences its own jobs only (the master's survival rules,
shard by shard) while the others go on. Signals, drain, shutdown and systemd's
READY, STATUS and WATCHDOG are the one master's.
"""

from __future__ import annotations

from runtime import config
from runtime.queue.shards import Shards

Served = list[tuple[str, tuple[str, ...]]]


def served_of(settings: config.Settings, worker: config.WorkerSettings) -> Served:
    """(namespace, its queues) for each namespace the worker's queues live in."""
    return list(Shards.of(settings).split(worker.queues).items())
