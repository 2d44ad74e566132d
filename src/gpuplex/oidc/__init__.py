"""The identity provider's tokens (OpenID Connect): its published keys, fetched and cached with
rotation followed (`keys`), and the checks a token must pass (`tokens`). Shared by the control
plane's API and the gateway, so both verify a token the same way."""
