"""Tests against the network-namespace lab (real sshd, real processes); fixtures in tests/conftest.py."""
