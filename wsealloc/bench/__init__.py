"""Benchmark instance suites and architecture sweeps, run locally (process isolation) or on Dask."""
