"""The exchanges area: declaring, redeclaring and deleting exchanges, and what their life does to bindings."""
