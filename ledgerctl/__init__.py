"""Tools for people, on top of the core, the web app's data and the workers: the
``webhook-ledger`` CLI, evidence bundles, the replay script and the start-up banner."""
