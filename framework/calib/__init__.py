"""``camit calibrate``: record every fact the emulation assumes on real (or emulated) hosts, compare
a bundle with the built-in profile (``framework/data/calibration-profile.json``), replay a bundle's
tool captures on emulated hosts (``python -m framework.lab up --npu a3 --calibration BUNDLE``)."""
