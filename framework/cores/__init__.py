"""Core dumps on the hosts under test: notice every crash of a run, attribute it, bring it back,
judge it; and the host logs of a failure (the modules' map: docs/internals/cores.md).
"""
