"""Tool declarations, one module per family (``TOOLS``); assembled by ``queries.registry.all_tools``."""
