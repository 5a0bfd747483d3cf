"""``manage.py pgq_credentials create|list|revoke USER``: access keys for the SQS endpoint.

``create`` prints the new key as the two environment lines AWS SDKs read
(``AWS_ACCESS_KEY_ID=…`` and ``AWS_SECRET_ACCESS_KEY=…``). The secret is shown this once:
only its encrypted form and its last four characters are stored, and it is never logged.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone


class Command(BaseCommand):
    help = "Create, list or revoke a user's access keys for the SQS endpoint (SigV4)."

    def add_arguments(self, parser: CommandParser) -> None:
        commands = parser.add_subparsers(dest="command", required=True)
        create = commands.add_parser("create", help="Create a key and print it once.")
        create.add_argument("user", help="Username of the key's owner.")
        create.add_argument("--description", default="", help="A note shown in the admin.")
        listing = commands.add_parser("list", help="List keys (secrets are never shown).")
        listing.add_argument("user", nargs="?", help="Only this user's keys.")
        revoke = commands.add_parser("revoke", help="Revoke a user's keys.")
        revoke.add_argument("user", help="Username of the keys' owner.")
        revoke.add_argument("--key", help="Only this key id (default: every active key).")

    def handle(self, *args: Any, command: str, **options: Any) -> None:
        getattr(self, f"_{command}")(**options)

    def _user(self, username: str) -> Any:
        model = get_user_model()
        try:
            return model._default_manager.get(**{model.USERNAME_FIELD: username})
        except model.DoesNotExist:
            raise CommandError(f"There is no user {username!r}.") from None

    def _create(self, *, user: str, description: str, **options: Any) -> None:
        from pgq_django.models import AccessKey

        owner = self._user(user)
        if len(description) > 200:
            raise CommandError("The description is at most 200 characters.")
        key, secret = AccessKey.objects.create_key(owner)
        if description:
            key.description = description
            key.save(update_fields=["description"])
        self.stdout.write(f"AWS_ACCESS_KEY_ID={key.key_id}")
        self.stdout.write(f"AWS_SECRET_ACCESS_KEY={secret}")
        self.stderr.write(
            f"Created key {key.key_id} for {owner}. The secret is shown only now: store it."
        )

    def _list(self, *, user: str | None, **options: Any) -> None:
        from pgq_django.models import AccessKey

        keys = AccessKey.objects.select_related("user").order_by("user_id", "created_at")
        if user is not None:
            keys = keys.filter(user=self._user(user))
        for key in keys:
            state = "active" if key.is_active else f"revoked {key.revoked_at:%Y-%m-%d %H:%M}"
            used = f"{key.last_used_at:%Y-%m-%d %H:%M}" if key.last_used_at else "never"
            self.stdout.write(
                f"{key.key_id}  {key.user}  secret …{key.secret_hint}  "
                f"created {key.created_at:%Y-%m-%d %H:%M}  last used {used}  {state}"
                + (f"  {key.description}" if key.description else "")
            )
        if not keys:
            self.stdout.write("no access keys")

    def _revoke(self, *, user: str, key: str | None, **options: Any) -> None:
        from pgq_django.models import AccessKey

        keys = AccessKey.objects.filter(user=self._user(user), revoked_at__isnull=True)
        if key is not None:
            keys = keys.filter(key_id=key)
            if not keys.exists():
                raise CommandError(f"{user} has no active key {key!r}.")
        count = keys.update(revoked_at=timezone.now())
        self.stdout.write(f"revoked {count} key{'s' if count != 1 else ''} of {user}")
