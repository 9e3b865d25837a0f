"""Records of every candidate, their CSV/JSON forms, the summary and progress display."""
