"""Data package: the example plugin's formula files."""
