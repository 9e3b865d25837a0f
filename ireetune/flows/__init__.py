"""The flows: each runs the stages in order."""
