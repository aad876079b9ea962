"""Policy search: sweeps over scenarios x policies x seeds and their paired comparison."""
