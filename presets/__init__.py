"""Data package: YAML files read through importlib.resources."""
