"""Benchmarks run with `make bench` (`python -m benchmarks.<name>` from the repository root)."""
