"""Reading a finished run: the plain-text report (every figure re-derivable with SQL), calibration against human
labels, planning from a pilot, and the analysis for people and coding agents (:func:`analyze`: summary, behaviour
changes, themes of the judges' reasons, the pairs behind them)."""
