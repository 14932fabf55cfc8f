"""Managing the activation cache: list, remove and verify entries (``oodbench cache ...``)."""

from __future__ import annotations

from typing import Any

from oodbench.errors import CacheError, InvalidInputError, OodbenchError, UnknownNameError
from oodbench.extract.key import cache_key, identity_of, reusable_identities
from oodbench.extract.store import ActivationStore, activations_root


def _stores() -> list[ActivationStore]:
    root = activations_root()
    if not root.is_dir():
        return []
    return [ActivationStore(p) for p in sorted(root.iterdir()) if p.is_dir()]


def list_cache() -> list[dict[str, Any]]:
    """One dict per cache entry.

    Keys: ``key``, ``model`` (spec), ``source`` (name), ``n`` (rows extracted; for an
    incomplete entry the rows of its complete shards), ``n_source``, ``skipped``, ``capture``,
    ``precision``, ``size_bytes``, ``complete``, ``shards_done``/``n_shards``, ``created``,
    ``path``, ``subset_of`` (the key of a complete entry of the same pass that captured more,
    so ``extract`` uses that one and this entry can be removed; ``None`` otherwise), and
    ``error`` for an entry whose manifest cannot be read.
    """
    entries = []
    identities: dict[str, dict[str, Any]] = {}
    for store in _stores():
        row: dict[str, Any] = {"key": store.key, "path": str(store.path)}
        row["size_bytes"] = store.size_bytes()
        try:
            manifest = store.read_manifest()
        except CacheError as err:
            manifest, row["error"] = None, str(err)
        manifest = manifest or {}
        shards = manifest.get("shards", {})
        skipped = sum(len(s["skipped"]) for s in shards.values())
        complete = bool(manifest.get("complete"))
        row.update(
            model=manifest.get("model"),
            source=manifest.get("source", {}).get("name"),
            n=manifest.get("rows") if complete else sum(s["rows"] for s in shards.values()),
            n_source=manifest.get("source", {}).get("n"),
            skipped=skipped,
            capture=manifest.get("capture", []),
            precision=manifest.get("precision"),
            complete=complete,
            shards_done=len(shards),
            n_shards=manifest.get("n_shards"),
            created=manifest.get("created"),
        )
        if complete:
            identities[store.key] = identity_of(manifest)
        entries.append(row)
    for row in entries:
        ident = identities.get(row["key"])
        larger = [cache_key(i) for i in reusable_identities(ident)[1:]] if ident else []
        row["subset_of"] = next((k for k in larger if k in identities), None)
    return entries


def _match(key_or_prefix: str) -> list[ActivationStore]:
    if not key_or_prefix or not key_or_prefix.strip():
        raise InvalidInputError("give a cache key or a non-empty prefix of one (see `oodbench cache ls`)")
    stores = _stores()
    matches = [s for s in stores if s.key.startswith(key_or_prefix)]
    if not matches:
        raise UnknownNameError("cache entry", key_or_prefix, [s.key for s in stores])
    return matches


def resolve_key(key_or_prefix: str) -> str:
    """The one full key that starts with ``key_or_prefix`` (like git's short hashes)."""
    matches = _match(key_or_prefix)
    if len(matches) > 1:
        shown = ", ".join(s.key[:12] for s in matches)
        raise InvalidInputError(
            f"cache key prefix {key_or_prefix!r} matches {len(matches)} entries ({shown}); "
            "give more characters"
        )
    return matches[0].key


def remove(key_or_prefix: str) -> str:
    """Delete the cache entry whose key is or starts with ``key_or_prefix``; returns its key."""
    key = resolve_key(key_or_prefix)
    ActivationStore.for_key(key).remove()
    return key


def verify(key: str | None = None) -> list[dict[str, Any]]:
    """Re-hash the files of one entry (``key`` or a prefix) or of every entry.

    Returns one dict per entry: ``key``, ``complete``, ``ok`` and ``problems`` (missing files,
    checksum mismatches, an unreadable manifest). An incomplete entry is checked shard by shard.
    """
    stores = [ActivationStore.for_key(resolve_key(key))] if key is not None else _stores()
    report = []
    for store in stores:
        try:
            problems = store.verify()
            manifest = store.read_manifest() or {}
        except OodbenchError as err:
            problems, manifest = [str(err)], {}
        report.append(
            {
                "key": store.key,
                "complete": bool(manifest.get("complete")),
                "ok": not problems,
                "problems": problems,
            }
        )
    return report
