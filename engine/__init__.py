"""bide's engine: the store, the runtime, intents, approvals, the watcher. Internal:
the public names are re-exported by the package root."""
