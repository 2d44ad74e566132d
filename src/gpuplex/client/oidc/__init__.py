"""Getting a token from the identity provider as a client: its discovery document and endpoints
(`provider`), a person on a terminal (`device_flow`, RFC 8628), a service account
(`client_credentials`, RFC 6749 4.4), and the token kept for this user between commands
(`saved_login`). Checking tokens is gpuplex.oidc's, the dashboard's sign-in gpuplex.server's."""
