"""gpuplex: share GPUs between tenants safely, fairly and with the bill to match."""

__version__ = "0.1.0"
