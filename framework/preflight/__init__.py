"""Preflight: is every host ready for a run — one probe script per host, judged into a host × check table.

``probe`` plans the probe and writes its script (sections in ``framework.remote.sections``' format);
``run`` runs it on the hosts and times the clock exchange; ``checks`` judges the sections (the core
check reads ``core_pattern`` through ``framework.cores.pattern``); the parsers of what Ascend tools
print are :mod:`framework.ascend.parse`.
"""
