"""The tuning database (SQLite): results that survive crashes and are reused across runs."""
