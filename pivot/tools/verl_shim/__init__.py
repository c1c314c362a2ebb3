"""Pivot's stand-in for the few modules of veRL that a veRL tool file imports, used only when
veRL itself does not import (`pivot.tools.verl_compat.ensure_verl_importable` puts this folder
first on sys.path, so the package below imports as the top-level `verl`).

This `__init__.py` exists so that the shim ships in Pivot's wheel (setuptools finds packages by
their `__init__.py`) and so that mypy checks the shim as `pivot.tools.verl_shim.verl...`; the
shim's own files import each other relatively, so the same code works under both names. Import
it only as `verl` (through `ensure_verl_importable`): under its long name its classes would be
different objects from the ones a tool file gets from `verl.tools.schemas`.
"""
