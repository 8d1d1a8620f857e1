"""Analyses (issue 42): burst, valve isolation, flushing and contaminant runs on a pinned model version."""
