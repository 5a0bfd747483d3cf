"""Who may use which queue and exchange, and the access keys of the SQS endpoint.

Grants carry pgpro_queue's meaning mapped onto Django's users and groups: a grant row gives a
user, or every member of a group, some rights on one queue (read, write, manage) or one
exchange (publish). Rights add up over all the rows that apply to a user; owners and
superusers have every right without a row. :mod:`pgq_django.access` is the one place that
turns these rows into a yes or no.

The grant's foreign key to its queue or exchange is enforced by the database with
``ON DELETE CASCADE`` (migration 0002), like a binding's, so dropping a queue drops its grants.
"""

from __future__ import annotations

import base64
import secrets
import string
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import models
from django.utils import timezone

from .exchanges import Exchange
from .queues import Queue

if TYPE_CHECKING:
    from cryptography.fernet import MultiFernet


def _grant_constraints(prefix: str, target: str) -> list[models.BaseConstraint]:
    """A grant names exactly one of a user and a group, and each at most once per target."""
    return [
        models.CheckConstraint(
            condition=(
                models.Q(user__isnull=False, group__isnull=True)
                | models.Q(user__isnull=True, group__isnull=False)
            ),
            name=f"{prefix}_one_grantee",
        ),
        *(
            models.UniqueConstraint(
                fields=[target, grantee],
                name=f"{prefix}_{grantee}",
                condition=models.Q(**{f"{grantee}__isnull": False}),
            )
            for grantee in ("user", "group")
        ),
    ]


class Grantee(models.Model):
    """The user-or-group half shared by both kinds of grant."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="+",
    )
    group = models.ForeignKey(
        "auth.Group", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )

    class Meta:
        abstract = True

    @property
    def grantee(self) -> str:
        return f"user {self.user}" if self.user_id else f"group {self.group}"


class QueueGrant(Grantee):
    """Rights of a user or group on one queue.

    read: lease, pop, browse and acknowledge; write: send; manage: purge, pause/resume,
    redrive, alter, drop and change the queue's grants.
    """

    queue = models.ForeignKey(
        Queue, on_delete=models.DO_NOTHING, db_constraint=False, related_name="grants"
    )
    can_read = models.BooleanField(default=True)
    can_write = models.BooleanField(default=True)
    can_manage = models.BooleanField(default=False)

    class Meta:
        app_label = "pgq_django"
        db_table = "pgq_queue_grant"
        constraints = _grant_constraints("pgq_queue_grant", "queue")

    def __str__(self) -> str:
        rights = [r for r in ("read", "write", "manage") if getattr(self, f"can_{r}")]
        return f"{self.grantee}: {', '.join(rights) or 'nothing'}"


class ExchangeGrant(Grantee):
    """The right of a user or group to publish through one exchange."""

    exchange = models.ForeignKey(
        Exchange, on_delete=models.DO_NOTHING, db_constraint=False, related_name="grants"
    )
    can_publish = models.BooleanField(default=True)

    class Meta:
        app_label = "pgq_django"
        db_table = "pgq_exchange_grant"
        constraints = _grant_constraints("pgq_exchange_grant", "exchange")

    def __str__(self) -> str:
        return f"{self.grantee}: {'publish' if self.can_publish else 'nothing'}"


# -- access keys ---------------------------------------------------------------------------

_KEY_ID_ALPHABET = string.ascii_uppercase + string.digits


def _fernet() -> MultiFernet:
    """A MultiFernet keyed from SECRET_KEY, then each of SECRET_KEY_FALLBACKS.

    Encrypting uses the current key; decrypting tries all of them, so rotating SECRET_KEY the
    Django way (old key moved to the fallbacks) keeps existing access keys working.
    """
    from cryptography.fernet import Fernet, MultiFernet
    from django.utils.crypto import salted_hmac

    keys = [settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", [])]
    return MultiFernet(
        [
            Fernet(
                base64.urlsafe_b64encode(
                    salted_hmac(
                        "pgq_django.AccessKey", "secret", secret=k, algorithm="sha256"
                    ).digest()
                )
            )
            for k in keys
        ]
    )


class AccessKeyManager(models.Manager["AccessKey"]):
    def create_key(self, user: Any) -> tuple[AccessKey, str]:
        """A new key for ``user``; returns it and the plain secret, shown to the user once."""
        key_id = "PGQ" + "".join(secrets.choice(_KEY_ID_ALPHABET) for _ in range(17))
        secret = secrets.token_urlsafe(30)
        key = self.create(
            user=user,
            key_id=key_id,
            encrypted_secret=_fernet().encrypt(secret.encode()).decode(),
            secret_hint=secret[-4:],
        )
        return key, secret

    def active(self) -> models.QuerySet[AccessKey]:
        return self.filter(revoked_at__isnull=True, user__is_active=True)


class AccessKey(models.Model):
    """An AWS-style key pair for the SQS endpoint (SigV4), owned by a user and revocable.

    Why the secret is encrypted, not hashed: SigV4 is an HMAC over the request keyed by a key
    derived from the secret, so the server must be able to recompute that HMAC — it needs the
    secret itself, and a one-way hash (as for passwords) cannot be used. The secret is stored
    encrypted with Fernet (AES-128-CBC + HMAC-SHA256) under a key derived from Django's
    SECRET_KEY, so a database dump alone does not reveal usable credentials; only
    ``secret_hint`` (the last four characters) is kept in clear for the admin.
    """

    key_id = models.CharField(max_length=32, unique=True, editable=False)
    encrypted_secret = models.TextField(editable=False)
    secret_hint = models.CharField(max_length=8, editable=False)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="pgq_access_keys"
    )
    description = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = AccessKeyManager()

    class Meta:
        app_label = "pgq_django"
        db_table = "pgq_access_key"
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.key_id

    @property
    def secret(self) -> str:
        """The plain secret, for verifying a SigV4 signature."""
        return _fernet().decrypt(self.encrypted_secret.encode()).decode()

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None

    def revoke(self) -> None:
        """Stop accepting this key; the row stays for the audit trail."""
        self.revoked_at = timezone.now()
        self.save(update_fields=["revoked_at"])
