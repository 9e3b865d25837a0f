"""The core layer: the records and protocols every stage shares, and atomic file writing.

Nothing here imports a stage; every stage may import from here (docs/architecture.md).
"""
