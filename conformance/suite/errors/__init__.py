"""The errors area: channel and connection errors, their reply codes and texts, and declarations."""
