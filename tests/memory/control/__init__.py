"""memory/control/: /memory, /forget, /export, /wipe in the core, the CLI and the platforms."""
