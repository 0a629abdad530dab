"""Hardening scenarios (issue 17): a shared host that cannot be trusted, secrets, cores, bounds, the env loader.

Each test plays an attacker or a broken host against the real parts (lab sshd, real processes, real files)
and checks what camit guarantees: nothing runs that camit did not verify, no secret reaches argv or a report,
every wait and every fetch ends within its bound, and the error names the host or file. Lab tests are skipped
with the reason when no lab is up (as in tests/integration); the lab fixtures live in tests/conftest.py.
"""
