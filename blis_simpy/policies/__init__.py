"""Policy templates per axis. The decision-tree templates, which sit on top of the axes'
modules, register themselves when a registry first needs them (registry.LATER)."""
