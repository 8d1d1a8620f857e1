"""``manage.py contexts_maintenance --revoke-stale | --purge | --refresh-issuer-keys``: the Celery beat jobs
of the contexts app, callable by hand (one service call each)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from contexts import services, token_errors, tokens


class Command(BaseCommand):
    help = "Revoke stale context handles and/or purge expired and revoked ones past the retention period."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--revoke-stale",
            action="store_true",
            help="revoke contexts of superseded runs, lapsed or moved leases and removed memberships",
        )
        parser.add_argument("--purge", action="store_true", help="delete contexts expired/revoked past retention")
        parser.add_argument("--retention-s", type=int, default=None, help="override TJWATER_CONTEXT_RETENTION_S")
        parser.add_argument(
            "--refresh-issuer-keys",
            action="store_true",
            help="re-read the issuer's metadata and JWKS now and publish them to the shared cache",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if not (options["revoke_stale"] or options["purge"] or options["refresh_issuer_keys"]):
            raise CommandError("choose --revoke-stale, --purge and/or --refresh-issuer-keys")
        if options["revoke_stale"]:
            result = services.contexts_revoke_stale()
            self.stdout.write(
                f"revoked run_superseded={result.run_superseded} lease_lapsed={result.lease_lapsed} "
                f"membership_removed={result.membership_removed}"
            )
        if options["purge"]:
            retention = None if options["retention_s"] is None else timedelta(seconds=options["retention_s"])
            self.stdout.write(f"purged {services.contexts_purge(retention=retention)}")
        if options["refresh_issuer_keys"]:
            try:
                keys = tokens.refresh_issuer_keys()
            except token_errors.AuthUnavailable:
                raise CommandError("the issuer's keys could not be fetched; the caches keep what they had") from None
            self.stdout.write(f"issuer keys refreshed source={keys.source} keys={len(keys.kids)} shared={keys.shared}")
