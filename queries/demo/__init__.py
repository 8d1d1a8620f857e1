"""The demo utility: deterministic seed builders used by ``manage.py seed_demo``."""
