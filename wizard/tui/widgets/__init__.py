"""Reusable widgets of the wizard (each with its own DEFAULT_CSS)."""
