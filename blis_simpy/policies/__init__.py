"""Policies: one small interface per decision point, a registry of templates per axis."""
