"""The largest signed tree, kept in Redis too, where every host of the site sees it.

Each host remembers the largest tree it signed in its own LOG_STATE_FILE (ledger/log.py). With
several hosts on one database that is not enough: host A does not know what host B signed, so a
database restored from an old backup would be refused only by the hosts that signed the lost
trees. With REDIS_URL set, every host also records each tree it signs in one Redis hash, by an
atomic "keep the larger" script, and checks the stored log against it; the log module then
holds the stored tree to the larger of the two.

The hash is named after the log's configured origin (LOG_ORIGIN), so sites that share one Redis
server keep apart. Like the file, it names only committed trees (it is written after the
storing transaction commits), so a stored tree read after it is at least as large unless the
database went back.

While Redis does not answer the site keeps working on its LOG_STATE_FILE alone, and says so
in its log: a rollback during a Redis outage is then refused only by the hosts that signed the
lost trees (as without REDIS_URL). Redis should persist its data (`appendonly yes`): a Redis
that forgets is caught up by the next receipt stored, but cannot refuse a restore before that.
"""

from __future__ import annotations

import functools
import json
import logging
from typing import Any

from django.conf import settings

logger = logging.getLogger(__name__)

# KEYS[1] the hash; ARGV the tree size, the state as JSON, its origin. Keeps the larger tree
# of one log; 1 if it wrote. A tree of another origin is of a log since continued under this
# one (`continuelog`; the write path checked that before it signed): the new log's replaces it.
# Redis runs a script alone, so two hosts cannot interleave their comparisons.
_KEEP_LARGER = """
local size = tonumber(redis.call('HGET', KEYS[1], 'tree_size'))
local state = redis.call('HGET', KEYS[1], 'state')
if size and size >= tonumber(ARGV[1]) and state and cjson.decode(state).origin == ARGV[3] then
    return 0
end
redis.call('HSET', KEYS[1], 'tree_size', ARGV[1], 'state', ARGV[2])
return 1
"""


def key() -> str:
    return f"receiptsite:log-state:{settings.LOG_ORIGIN}"


@functools.cache
def _client(url: str) -> tuple[Any, Any]:
    """One connection pool (and the registered script) per process and URL."""
    import redis

    timeout = float(settings.DATABASE_TIMEOUT)
    client = redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
    return client, client.register_script(_KEEP_LARGER)


def read() -> dict[str, Any] | None:
    """The state remembered in Redis (the JSON object LOG_STATE_FILE holds), or None: no
    REDIS_URL, nothing remembered yet, or Redis not answering (logged). Raises ValueError
    when what Redis holds is not a state."""
    url = settings.REDIS_URL
    if not url:
        return None
    import redis

    try:
        raw = _client(url)[0].hget(key(), "state")
    except redis.RedisError as error:
        logger.error("transparency log: the tree remembered in Redis is not checked: %s", error)
        return None
    if raw is None:
        return None
    state = json.loads(raw)
    if not isinstance(state, dict):
        raise ValueError("not a JSON object")
    return state


def write(state: dict[str, Any]) -> None:
    """Record `state` in Redis unless a tree at least as large is recorded already. Redis
    not answering is logged, not raised: the next tree stored catches it up."""
    url = settings.REDIS_URL
    if not url:
        return
    import redis

    try:
        _client(url)[1](
            keys=[key()], args=[int(state["tree_size"]), json.dumps(state), state["origin"]]
        )
    except redis.RedisError as error:
        logger.error("transparency log: cannot remember the signed tree in Redis: %s", error)
