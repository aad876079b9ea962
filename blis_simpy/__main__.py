"""`python -m blis_simpy` is the `blis-simpy` command."""

from blis_simpy.cli import main

main()
