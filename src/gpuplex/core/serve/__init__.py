"""Pure serving math: token estimates, rate-limit windows, the fair queue, routing choice."""
