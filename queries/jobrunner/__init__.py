"""One job runner for every kind of background work (issue 42): the kind registry and the runner."""
