"""Version of the stand-in wheel: the version the real CAM build gives its wheel (CAM_WHL_VERSION
209.0.0.B001, normalised). Kept in its own module so setuptools reads it without importing torch; the
package does not import it: like the real wheel (a bare extension module with no ``__version__``,
npu-fidelity.md §1), its version is the distribution metadata's (``importlib.metadata.version``)."""

__version__ = "209.0.0b1"
