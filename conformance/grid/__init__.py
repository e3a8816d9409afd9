"""`amqp-conformance grid`: targets x clients, every cell a run of the suite, into one lake."""
