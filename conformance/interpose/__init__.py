"""The one interposer: an asyncio TCP relay between AMQP clients and a broker (`relay`), with
pluggable per-direction transforms and sinks, built on sans-IO frame cutting (`frames`) and the
byte-to-frame-record tap (`tap`). The traffic recorder, the suite-through-clients recorder and the
tests' deviating, hostile and wedging proxies are this relay with different transforms or sinks."""
