"""`python -m gpuplex.cli`: the same as the `gpuplex` command."""

from gpuplex.cli.entry import main

main()
