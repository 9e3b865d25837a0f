"""Tuning specs: build them with the IREE bindings, read them back, link them."""
