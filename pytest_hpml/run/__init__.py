"""Layer 5, the end of a session: measure again or in pairs, count instructions, judge, control
false alarms, record baselines and set the exit status; the words come from ``report/``."""
