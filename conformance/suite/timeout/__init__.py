"""The timeout area: consumer delivery-acknowledgement timeouts, and the timeout machine."""
