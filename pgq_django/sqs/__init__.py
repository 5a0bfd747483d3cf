"""An Amazon SQS-compatible endpoint: stock SQS SDKs talk to pgq_django queues.

The endpoint speaks the AWS JSON 1.0 protocol that current SDKs use (one URL, ``POST`` with
``X-Amz-Target: AmazonSQS.<Action>``), verifies each request's Signature Version 4 against an
:class:`~pgq_django.models.AccessKey`, checks the key owner's grants with
:mod:`pgq_django.access`, and translates each action into calls of the functional API
(``import pgq_django as pgq``). It never runs SQL of its own.

Modules, by concern: :mod:`.sigv4` (the signature algorithm), :mod:`.auth` (requests to key
owners), :mod:`.errors` (SQS error codes and the one mapping from PgqError), :mod:`.digests`
(the MD5 digests SDKs verify), :mod:`.params` (reading request parameters), :mod:`.queues`
and :mod:`.attributes` (queue actions and attributes), :mod:`.messages` and
:mod:`.message_attributes` (message actions and attributes), :mod:`.views` and :mod:`.urls`.
"""
