"""Runs files shipped with dlformula: published training runs `dlformula validate` predicts.

Each `*.yaml` here is a set named by its file name (`dlformula validate public`); the first
comment lines of a file describe it (`dlformula validate --list`). Adding a set is dropping a
file here.
"""
