"""The stand-in's version, where camit's preflight reads torch_npu's (``<package>/version.py``)."""

__version__ = "2.13.0.post0"
