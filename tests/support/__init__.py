"""Helpers for the tests: private Redis servers, a frozen clock, deadlines."""
