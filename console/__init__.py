"""edge-console: discover agents on the LAN, deploy, roll back and monitor them."""

__version__ = "0.1.0"
