"""Starting a master: `runtime worker MODULE... --queues a,b`. The start-up
checks (runtime.master.preflight) run first: a worker that must not start
says why in one line before anything is forked."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import uvloop

from runtime import config
from runtime.master import preflight, shards
from runtime.master.master import Master
from runtime.proctitle import set_title
from runtime.queue.connection import default_worker_id, resolve_url

log = logging.getLogger(__name__)


def run_worker(
    settings: config.Settings, worker: config.WorkerSettings, worker_id: str | None = None
) -> int:
    """Runs a master until it is told to stop; returns the exit code. The queues of a
    sharded site that live in several namespaces get one master each, under a
    supervisor (runtime.master.shards)."""
    cwd = str(Path.cwd())
    if cwd not in sys.path:  # `runtime worker myapp.jobs` from the project's directory
        sys.path.insert(0, cwd)
    return shards.run_site(settings, worker, worker_id, run_master)


def run_master(
    settings: config.Settings, worker: config.WorkerSettings, worker_id: str | None = None
) -> int:
    """Runs one master (of one namespace) until it is told to stop."""
    url = resolve_url(settings)
    worker_id = worker_id or default_worker_id()
    set_title(f"runtime master {worker_id} starting")
    preflight.check(settings, worker, url)
    master = Master(settings, worker, url, worker_id)
    return int(uvloop.run(master.run()))
