"""Reading a finished run: the plain-text report, with every figure re-derivable from the run folder with SQL."""
