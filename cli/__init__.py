"""The `armlm` command line: the registry of its commands and of the benchmarks, on the top floor because it names
every layer below it (a study's, a report's and a bench's commands included: tests/test_layers.py)."""
