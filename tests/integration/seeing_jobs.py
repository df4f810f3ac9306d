"""Jobs for the tests of seeing inside a job (tests/integration/test_seeing.py):
what they cost, what they print as they run, the trace they run in."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any


def _burn(seconds: float) -> None:
    start = time.process_time()
    n = 0
    while time.process_time() - start < seconds:
        n += 1


def heavy(job: Any) -> None:
    """About 0.6 s of CPU and 200 MB touched."""
    block = bytearray(200 * 1024 * 1024)
    for i in range(0, len(block), 4096):
        block[i] = 1
    _burn(0.6)
    del block


def light(job: Any) -> None:
    return None


def burn_in_subprocess(job: Any) -> None:
    """A subprocess burns 0.5 s of CPU; the job waits for it."""
    code = "import time\ns=time.process_time()\nwhile time.process_time()-s<0.5: pass\n"
    subprocess.run([sys.executable, "-c", code], check=True)


def tick(job: Any) -> None:
    """Prints a numbered line every `every_s` seconds, `count` times."""
    for i in range(int(job.data.get("count", 5))):
        print(f"tick {i} at {time.time():.3f}", flush=True)
        time.sleep(float(job.data.get("every_s", 0.3)))


def span_of(job: Any) -> dict[str, Any]:
    """The trace and span the job runs in, and its parent, as hex."""
    from opentelemetry import trace  # noqa: PLC0415 - only jobs that trace load it

    span = trace.get_current_span()
    context = span.get_span_context()
    parent = getattr(span, "parent", None)
    return {
        "trace_id": f"{context.trace_id:032x}",
        "span_id": f"{context.span_id:016x}",
        "parent": None if parent is None else f"{parent.span_id:016x}",
        "links": [f"{link.context.trace_id:032x}" for link in getattr(span, "links", ())],
    }


def span_then_fail_once(job: Any) -> dict[str, Any]:
    if job.attempt == 1:
        raise RuntimeError("the first attempt fails on purpose")
    return span_of(job)


def modules(job: Any) -> list[str]:
    """The opentelemetry modules loaded in the child."""
    return sorted(name for name in sys.modules if name.split(".")[0] == "opentelemetry")


def dump(job: Any) -> str:
    return json.dumps(job.data)
