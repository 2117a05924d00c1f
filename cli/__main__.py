"""`python -m armlm <command> [settings]`: the `armlm` console script, for a study's stage processes and for an
environment whose scripts folder is not on PATH."""

from armlm.commands import main

main()
