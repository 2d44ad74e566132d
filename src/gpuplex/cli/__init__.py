"""The `gpuplex` command."""
