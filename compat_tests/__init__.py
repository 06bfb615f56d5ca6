"""Client-level compatibility tests: pika, aio-pika and kombu against any AMQP 0-9-1 broker URL.

Run against a real RabbitMQ 3.10 (`.ci/rabbitmq.sh start`) to prove each expectation, and against
this project's broker (the default when no URL is given). See docs/COMPAT.md.
"""
