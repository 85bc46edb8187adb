"""The policy core: pure Python over frozen dataclasses. No Django, no I/O, no wall clock.

The scheduler worker, the simulator, the benchmarks and the start-time forecast all call it.
"""
