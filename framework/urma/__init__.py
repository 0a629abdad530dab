"""camit's URMA-harness compatibility layer: UMDK's ``test/intergration_test`` cases run unchanged.

Design: docs/internals/urma.md; for users: docs/porting-urma.md.
"""
