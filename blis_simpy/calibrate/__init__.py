"""Calibration: fit step-time coefficients to real measurements (`blis-simpy calibrate`)."""
