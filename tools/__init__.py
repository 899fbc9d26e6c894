"""Build-time generators (run by tools/generate.py); not part of the installed package."""
