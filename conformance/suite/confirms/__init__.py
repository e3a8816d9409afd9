"""The confirms area: publisher confirms and their transaction neighbours, and the confirm machine."""
