"""Recording real traffic for the audit: the relay's lake sink (`lake_sink`, on the one interposer,
`conformance.interpose`), capture import (`pcap`) and the `record` subcommand (`cli`)."""
