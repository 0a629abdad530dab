"""Controller-side suite: each test launches a rank-side module (suites/cam/rank) across the cluster.

The rank-side tree runs only under torchrun on the hosts; it is never collected here.
"""

collect_ignore = ["rank"]
