"""The cluster area: what a client sees when a node of the broker's cluster fails (CLU-01..09)."""
