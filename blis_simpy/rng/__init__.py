"""Random number generators that reproduce the Go reference's value streams bit for bit."""
