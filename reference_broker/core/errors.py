"""Protocol errors raised by the rules: `soft` closes the channel, `hard` the connection (ERR-02)."""

from __future__ import annotations

from codec import AmqpError, ReplyCode


class Final(Exception):
    """An AmqpError whose class/method ids are final (0/0 where RabbitMQ sends none)."""

    def __init__(self, error: AmqpError) -> None:
        super().__init__(str(error))
        self.error = error


def soft(code: ReplyCode, text: str) -> AmqpError:
    return AmqpError(code, text, scope="channel")


def hard(code: ReplyCode, text: str) -> AmqpError:
    return AmqpError(code, text, scope="connection")
