"""The access area (ACC-*): vhost access, permissions, topic permissions, SASL, user-id, loopback."""
