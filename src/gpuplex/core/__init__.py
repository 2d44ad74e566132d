"""Pure decisions: values in, values out. No I/O, no clock, no environment, no randomness, no logging."""
