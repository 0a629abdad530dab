"""Core dumps on the hosts under test: notice every crash of a run, attribute it, bring it back,
judge it.

``pattern`` is the one model of ``kernel.core_pattern`` (preflight reads it too); ``scan`` finds the
cores that appeared between two scans; ``inspection`` reads, attributes, backtraces and judges them;
``logs`` brings the kernel and Ascend logs of a failure with their signatures; ``watch`` is the
executor (:class:`~framework.cores.watch.CoreWatch`); the one watch around a run that the pytest
plugin, ``BaseTest`` and ``camit run`` share is :class:`framework.launch.runwatch.ClusterWatch`.
"""
