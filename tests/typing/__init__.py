"""Snippets mypy checks: typed jobs' arguments are checked (runtime.typed, ParamSpec)."""
