"""Fixtures: registry (filled in by the work that owns it)."""
