"""Whole-model tuning: hot dispatches, per-dispatch tuning, linked specs, model-level selection."""
