"""medanon: de-identification of medical images for sharing and training.

The package is organised so that data flows one way (see ``DESIGN.md``):
``data`` loads and preprocesses images, ``phantoms`` makes the embedded test
datasets, and later stages turn images into private releases and evaluate them.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
