"""Starting a master: `runtime worker MODULE... --queues a,b`. The start-up
checks (runtime.master.preflight) run first: a worker that must not start
says why in one line before anything is forked."""

from __future__ import annotations

import logging
import sys
from dataclasses import replace
from pathlib import Path

import uvloop

from runtime import config
from runtime.master import preflight, shards
from runtime.master.master import Master
from runtime.proctitle import set_title
from runtime.queue import urls
from runtime.queue.connection import default_worker_id, resolve_url
from runtime.queue.shards import Shards

log = logging.getLogger(__name__)


def run_worker(
    settings: config.Settings, worker: config.WorkerSettings, worker_id: str | None = None
) -> int:
    """Runs a master until it is told to stop; returns the exit code. The queues of a
    sharded site that live in several namespaces are served by one master with a
    shard for each namespace (runtime.master.shards)."""
    cwd = str(Path.cwd())
    if cwd not in sys.path:  # `runtime worker myapp.jobs` from the project's directory
        sys.path.insert(0, cwd)
    served = shards.served_of(settings, worker)
    if len(served) == 1:  # one namespace: the ordinary master of it
        [(namespace, queues)] = served
        settings, worker = replace(settings, namespace=namespace), replace(worker, queues=queues)
        return run_master(settings, worker, worker_id)
    settings = replace(settings, namespace=served[0][0])
    return run_master(settings, worker, worker_id, served)


def run_master(
    settings: config.Settings,
    worker: config.WorkerSettings,
    worker_id: str | None = None,
    several: shards.Served | None = None,
) -> int:
    """Runs one master until it is told to stop: of `settings.namespace`, or of
    every namespace `several` names (each with its queues)."""
    url = resolve_url(settings)
    worker_id = worker_id or default_worker_id()
    set_title(f"runtime master {worker_id} starting")
    served = several or [(settings.namespace, worker.queues)]
    rule = Shards.of(settings)
    if urls.kind_of(url) != "cluster":  # one server (or one primary) holds them all
        served = [served[0], *(shard for shard in served[1:] if rule.url_of(shard[0]))]
    for namespace, queues in served:  # on a cluster or a server of its own, each namespace's
        mine = rule.url_of(namespace) or url
        preflight.check(
            replace(settings, namespace=namespace), replace(worker, queues=queues), mine
        )
    master = Master(settings, worker, url, worker_id, several)
    return int(uvloop.run(master.run()))
