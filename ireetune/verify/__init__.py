"""Verification: a candidate's outputs must equal the default configuration's."""
