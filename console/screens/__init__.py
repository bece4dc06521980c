"""Screens of the console TUI, one per module."""
