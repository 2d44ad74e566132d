"""Chargeback, pure: the price book from `pricing:`, statements per tenant and for the fleet whose
cents add up exactly, each job's part of them, CSV and JSON renderings, budget threshold
crossings. See docs/chargeback.md.

Import a name from the module that defines it: this package loads none of them, so that a caller
of one (`gpuplex plan`'s placement costs) does not pay for all."""
