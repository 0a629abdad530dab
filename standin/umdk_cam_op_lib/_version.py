"""Version of the stand-in wheel: the version the real CAM build gives its wheel (CAM_WHL_VERSION
209.0.0.B001, normalised). Kept in its own module so setuptools reads it without importing torch."""

__version__ = "209.0.0b1"
