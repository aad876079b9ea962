"""Scenario files: schema, validation, catalog lookup and resolution."""
