"""rafka's benchmarks, run with ``python -m bench [name ...]``; each is a module of this package."""
