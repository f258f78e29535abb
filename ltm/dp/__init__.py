"""The privacy arithmetic of LTM in one place (issue #20, item 5).

Every sensitivity, the privacy defaults, and the noise rules live in the modules of this package;
nothing outside it computes a sensitivity (``tests/test_dp_sensitivity.py`` greps the source tree
for one).  Import from the modules themselves (``ltm.dp.sensitivity``, ``ltm.dp.defaults``, …):
this package re-exports nothing.
"""
