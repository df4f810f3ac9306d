"""Jobs of the batch tests: jobs that add to their batch, nap, or fail until told not to."""

from __future__ import annotations

import os
import time
from typing import Any

from runtime import Fail

B = "tests.integration.batch_jobs"


def nap(job: Any) -> None:
    """Sleeps data["seconds"] (default 0)."""
    time.sleep(job.data.get("seconds", 0))


def grow(job: Any) -> None:
    """Adds data["children"] naps of data["seconds"] to its batch (ctx.batch.put),
    with its completion, or at once with data["now"]."""
    for _ in range(job.data["children"]):
        job.batch.put("q", f"{B}:nap", {"seconds": job.data["seconds"]}, now=job.data["now"])
    time.sleep(job.data.get("seconds", 0))


def fail_unless(job: Any) -> None:
    """Fails for good (Fail) while the file data["path"] does not exist."""
    if not os.path.exists(job.data["path"]):
        raise Fail("not yet")
