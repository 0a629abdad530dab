"""Preflight: is every host ready for a run — one probe script per host, judged into a host × check
table."""
