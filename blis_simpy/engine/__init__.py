"""Step-time engines: analytical models of how long one batch step takes on a GPU."""
