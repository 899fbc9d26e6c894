"""pinctl's configuration: every setting declared once (settings), loaded with provenance from
files, the environment and flags (loader), files read as StrictModes demands (files)."""
