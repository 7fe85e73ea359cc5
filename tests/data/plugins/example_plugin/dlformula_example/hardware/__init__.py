"""Data package: the example plugin's hardware node types."""
