"""Validation against real serving measurements: read runs in the public ground-truth layout,
simulate each measured stage natively, and report the errors (`blis-simpy validate-real`)."""
