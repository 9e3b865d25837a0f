"""The compile pool: candidates to binaries, in parallel, with timeouts and crash capture."""
