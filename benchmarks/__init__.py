"""Load and transform benchmarks, run against real processes on loopback."""
