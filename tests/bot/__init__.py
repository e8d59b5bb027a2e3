"""bot/: the core's parts that are not a subpackage of their own (config, limits, ports, tasks)."""
