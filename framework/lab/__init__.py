"""The network-namespace lab: a real multi-host cluster on one machine, for tests without hardware.

:mod:`~framework.lab.plan` maps a lab's shape to names, addresses, file texts and commands (pure);
:mod:`~framework.lab.system` runs commands, finds processes and takes locks; :mod:`~framework.lab.manage`
executes the plan (``python -m framework.lab up|down|status``); :mod:`~framework.lab.artifacts` builds the
CAM stand-in artifacts the lab deploys (``python -m framework.artifacts build``).
"""
