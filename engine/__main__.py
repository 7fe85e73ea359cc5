"""`python -m dlformula ...`: the same program as the `dlformula` script."""

from dlformula.launch import entry

if __name__ == "__main__":
    entry()
