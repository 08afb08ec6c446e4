"""Who is calling and what they may do: the credential schemes every route declares (`auth`), scoped
API tokens, the dashboard session and sign-in with password or passkey (`session`, `signin`,
`passkeys/`), the per-client counts that refuse too many sign-in failures or calls (`login_attempts`,
`rate_limit`), the `[dashboard]` settings and the dashboard's own listener (`dashboard_config`,
`dashboard_origin`), and the labels operators give to tokens and passkeys (`labels`)."""
