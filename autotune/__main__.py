"""`python -m autotune ...`: the CLI without an installed entry point (e.g. a bare GPU host)."""

from autotune.cli import main

main()
