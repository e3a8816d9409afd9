"""The alarms area: resource alarms and publisher blocking (ALM-01..05)."""
