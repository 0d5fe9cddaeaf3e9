"""Benchmark suite of sklearn-falcon: graph generators, peers and the runner.

Run ``python -m benchmarks.run --help`` for the entry point.
"""
