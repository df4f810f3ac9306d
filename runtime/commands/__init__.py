"""The verbs of the `runtime` command, grouped by what they act on."""
