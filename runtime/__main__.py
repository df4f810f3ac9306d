"""`python -m runtime ...` is the `runtime` command."""

from runtime.cli import main

main()
