"""The config linter's rule families, one module per family (``base``: the context and finding helpers they
share). ``wizard.config.check`` runs them; nothing here reads a file."""
