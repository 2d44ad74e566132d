"""`python -m gpuplex.cli`: the same as the `gpuplex` command."""

from gpuplex.cli.main import run

run()
