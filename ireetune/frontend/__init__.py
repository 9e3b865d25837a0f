"""Frontends: turn what the user gives (a dispatch benchmark or a model) into dispatches."""
