"""The Kafka wire protocol: framing, the message codec, and the request handlers that turn
Kafka clients' requests into calls on rafka's services. No Ray imports: the listener actor
(``rafka.actors.kafka_listener``) owns the sockets and the Ray calls.

The codec: ``frames`` (headers, ``read_request``, ``encode_response``, ``SUPPORTED``) over
``schema`` (the field DSL and its compiler), ``primitives`` (Kafka's types) and one
``messages_*`` module of schemas per API family, registered in ``messages``."""
