"""The reference Go BLIS's formats: its JSON encoding and output files (`results.json`, the
printed metrics), and conversion of its command lines, policy bundles and workload specs into
scenarios. How compat runs differ in behaviour is chosen in `blis_simpy.sim.modes`."""
