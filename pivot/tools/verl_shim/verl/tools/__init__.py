"""Pivot's stand-in for the veRL module `verl.tools`, used only when veRL itself does not import.

Empty, as veRL's is: tool files import `verl.tools.base_tool` and `verl.tools.schemas`."""
