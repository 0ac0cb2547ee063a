"""Validators return reports; non-conformance is data, never an exception."""
