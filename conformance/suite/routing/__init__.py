"""The routing area: where a publish goes (default exchange, exchange types, bindings, returns)."""
