"""A plugin whose module fails to import."""
import dlformula_no_such_module  # noqa: F401
