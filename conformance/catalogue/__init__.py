"""The rule catalogue (rules.toml), broker profiles, test selection by area or rule, coverage."""
