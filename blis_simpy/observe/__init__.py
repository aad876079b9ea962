"""Driving a real OpenAI-compatible server with a scenario's workload (`blis-simpy observe`)
and the accuracy commands (`validate-real`, `calibrate`)."""
