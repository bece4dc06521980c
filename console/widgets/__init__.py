"""Widgets of the console TUI, one per module."""
