"""Shared test support: the agent harness (in-process and subprocess), ``eventually()``,
bundle and model builders, and the fake backend of the unit layer."""
