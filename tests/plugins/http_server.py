"""Fixtures: http_server (filled in by the work that owns it)."""
