"""Recording real traffic for the audit: a transparent relay (`relay`), capture import (`pcap`),
the byte-to-frame tap (`tap`) and the results-lake writer (`lake`)."""
