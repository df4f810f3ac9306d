"""The dashboard: pages in a real browser, actions, security, plots."""
