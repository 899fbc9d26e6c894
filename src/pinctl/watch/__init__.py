"""sync --watch: the watcher, its health, and the periodic check whose figures the metrics serve."""
