"""The version of ireetune (pyproject.toml declares the same); run files and reports carry it."""

__version__ = "0.1.0"
