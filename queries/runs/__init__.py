"""Running analyses (issue 42): what a run costs before it is queued (``cost``), measured on this machine."""
