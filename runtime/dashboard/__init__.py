"""The web dashboard of `runtime dashboard`: pages over a deployment's queues, jobs,
failures, workers, domains, recurring jobs and statistics, live numbers, actions
behind a same-origin check, and /metrics. Needs the `dashboard` extra
(Starlette, Jinja2, uvicorn)."""

from runtime.dashboard.app import Options, create_app

__all__ = ["Options", "create_app"]
