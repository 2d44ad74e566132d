"""gpuplex as a client of its own services, for the CLI and anything else that calls them: the
control plane's REST API (`control_plane`) and signing in with the identity provider (`oidc`).
No command, option or terminal output lives here (those are gpuplex.cli's); the import contract
"client is no UI" in .importlinter keeps it so."""
