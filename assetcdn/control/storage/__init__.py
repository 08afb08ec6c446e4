"""What the control plane keeps: the git repository of files (`git_store`), the SQLite database every
write goes through (`database`), the manifest and its generations (`manifest_store`), the zones'
metadata (`zones_store`), and the configuration edges need beside the manifest, the `_headers` /
`_redirects` rules and the custom-domain map (`edge_config_store`)."""
