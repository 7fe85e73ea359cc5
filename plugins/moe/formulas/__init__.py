"""Data package: the MoE plugin's formula files (read through importlib.resources)."""
