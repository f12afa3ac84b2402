"""Rate limits: token buckets that every worker and every host of the site share, and how a
route takes from them (`throttle`; pages by `rate_limited`, JSON routes by api_route, whose
`authenticate` charges each failed authentication to the client address's `auth` bucket).

A bucket holds up to `burst` tokens and refills at `rate` tokens a second; a request takes
`cost` of them, or is refused and told how long to wait. Each take is one atomic step on the
shared store, so several gunicorn workers and several hosts count against the same bucket:

- in the database by default (the `RateBucket` table): one `INSERT ... ON CONFLICT DO UPDATE
  ... WHERE` statement, which PostgreSQL runs under the row's lock and SQLite under its write
  lock; a refused take updates nothing, and one more read says how long to wait;
- in Redis when `REDIS_URL` is set: one Lua script, which Redis runs alone.

Times are seconds since the epoch (`time.time()`) of the process taking, so that hosts agree;
a clock behind the one that took last refills nothing, it never takes tokens back.
"""

from __future__ import annotations

import functools
import hashlib
import ipaddress
import logging
import math
import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.db import connection
from django.db.models import F, Value
from django.http import HttpRequest, HttpResponse

from receiptsite import metrics
from receiptsite.problems import Problem
from receiptsite.receipts.models import RateBucket

logger = logging.getLogger(__name__)

# Every this many takes, a process deletes the database buckets that have refilled to the
# brim: they hold nothing a new bucket would not, and the table stays as small as the set of
# clients seen lately.
PRUNE_EVERY = 1000
_takes = 0


def bucket_key(scope: str, who: str) -> str:
    """The bucket's name: the scope and the API key prefix or client address (hashed when
    long, so that a strange forwarded address cannot make a strange key)."""
    if len(who) > 64:
        who = "sha256:" + hashlib.sha256(who.encode()).hexdigest()
    return f"{scope}:{who}"


def take(key: str, burst: float, rate: float, cost: float, now: float | None = None) -> float:
    """Take `cost` tokens (at most `burst`) from bucket `key`; 0 when allowed, else the
    seconds until enough tokens are back. `now` is for tests; the default is the clock."""
    now = time.time() if now is None else now
    if settings.REDIS_URL:
        return _take_redis(settings.REDIS_URL, key, burst, rate, cost, now)
    return _take_database(key, burst, rate, cost, now)


# --- taking from a route ----------------------------------------------------------------

View = Callable[..., HttpResponse]

def _limits() -> dict[str, tuple[float, float]] | None:
    # Parsed and checked once, at start (receiptsite.config.rate_limits); None is off.
    limits: dict[str, tuple[float, float]] | None = settings.RATE_LIMITS
    return limits


Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def address_of(text: str) -> Address | None:
    """An address as a peer or an X-Forwarded-For hop gives it (`203.0.113.7`, `2001:db8::7`,
    with a port `203.0.113.7:4711` or `[2001:db8::7]:4711`, as some proxies write it); an
    IPv4-mapped IPv6 address (`::ffff:10.0.0.7`, a dual-stack socket's) as its IPv4 address.
    None for anything else."""
    text = text.strip()
    if text.startswith("["):
        text = text[1:].partition("]")[0]
    elif text.count(":") == 1:
        text = text.partition(":")[0]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _trusted(address: Address) -> bool:
    # settings.TRUSTED_PROXIES holds the networks config.trusted_proxies parsed at start (a
    # test may set strings).
    return any(
        address in (network if not isinstance(network, str) else ipaddress.ip_network(network))
        for network in settings.TRUSTED_PROXIES
    )


def from_trusted_proxy(request: HttpRequest) -> bool:
    """Whether the request's peer (REMOTE_ADDR) is one of TRUSTED_PROXIES: only then are its
    X-Forwarded-For and X-Forwarded-Proto believed."""
    return _trusted_peer(request.META.get("REMOTE_ADDR", ""))


@functools.lru_cache(maxsize=1024)
def _trusted_peer(peer: str) -> bool:
    # Worked out once per peer address (a worker sees few: the proxies, or the clients; the
    # cache is bounded), where each request parsed it: 4 % of a served /healthz's time in
    # Django. Again when the setting changes (a test's).
    address = address_of(peer)
    return address is not None and _trusted(address)


def _forget_trusted_peers(*, setting: str, **kwargs: object) -> None:
    if setting == "TRUSTED_PROXIES":
        _trusted_peer.cache_clear()


setting_changed.connect(_forget_trusted_peers)


def client_address(request: HttpRequest) -> str:
    """The client's address. From a peer that is not one of TRUSTED_PROXIES, the peer's own:
    its X-Forwarded-For is not believed. From one of them, X-Forwarded-For read from the
    right: each hop is the address the proxy after it saw, so the trusted proxies are skipped
    and the first address that is not one of them is the client (what a client wrote itself
    sits further left, and is never reached). A hop that is no address ends the reading: the
    address of the proxy that reported it is the client's then."""
    peer = request.META.get("REMOTE_ADDR", "")
    if not from_trusted_proxy(request):
        return peer
    nearest = address_of(peer)
    for hop in reversed(request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")):
        address = address_of(hop)
        if address is None:
            break
        if not _trusted(address):
            return str(address)
        nearest = address
    # Every hop a trusted proxy (a request from inside): the farthest one is the client.
    return str(nearest)


def throttle(scope: str, who: str, cost: int = 1, now: float | None = None) -> None:
    """Take `cost` tokens from `who`'s bucket in `scope`; Problem 429 when there are too few.
    A cost above the burst is charged as the whole burst, so it can pass once full. `now`
    (seconds since the epoch) is for tests."""
    limits = _limits()
    if limits is None or scope not in limits or cost <= 0:
        return
    burst, rate = limits[scope]
    key = bucket_key(scope, who)
    wait = take(key, burst, rate, min(float(cost), burst), now)
    if wait <= 0:
        return
    seconds = max(1, math.ceil(wait))
    metrics.count_refusal(scope)
    raise Problem(
        429,
        "rate-limited",
        "Too many requests",
        f"Slow down: try again in {seconds} second(s).",
        headers={"Retry-After": str(seconds)},
    )


def rate_limited(scope: str) -> Callable[[View], View]:
    """For pages: one token per request from the client address's bucket in `scope`."""

    def decorator(view: View) -> View:
        @functools.wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            try:
                throttle(scope, client_address(request))
            except Problem as error:
                return error.response()
            return view(request, *args, **kwargs)

        return wrapper

    return decorator


# --- the database ----------------------------------------------------------------------------

# The tokens a bucket holds now: what it held, plus the refill since its stamp, capped.
_REFILLED = "{least}(%(burst)s, {table}.tokens + {greatest}(0, %(now)s - {table}.stamp) * %(rate)s)"

_TAKE = """
INSERT INTO {table} (name, tokens, stamp) VALUES (%(key)s, %(burst)s - %(cost)s, %(now)s)
ON CONFLICT (name) DO UPDATE
SET tokens = {refilled} - %(cost)s, stamp = {greatest}({table}.stamp, %(now)s)
WHERE {refilled} >= %(cost)s
RETURNING tokens
"""


@functools.cache
def _statements(vendor: str) -> tuple[str, str]:
    # SQLite's two-argument min() and max() are PostgreSQL's LEAST and GREATEST.
    least, greatest = ("min", "max") if vendor == "sqlite" else ("LEAST", "GREATEST")
    table = RateBucket._meta.db_table
    refilled = _REFILLED.format(least=least, greatest=greatest, table=table)
    take = _TAKE.format(table=table, refilled=refilled, greatest=greatest)
    read = f"SELECT {refilled} FROM {table} WHERE name = %(key)s"
    return take, read


def _take_database(key: str, burst: float, rate: float, cost: float, now: float) -> float:
    global _takes
    take, read = _statements(connection.vendor)
    params: dict[str, str | float] = {
        "key": key, "burst": burst, "rate": rate, "cost": cost, "now": now
    }
    with connection.cursor() as cursor:
        cursor.execute(take, params)
        if cursor.fetchone() is not None:
            wait = 0.0
        else:
            # Refused: nothing was written. The wait is read after the fact, so another take
            # in between may make it a little short; the client then waits once more.
            cursor.execute(read, params)
            row = cursor.fetchone()
            tokens = float(row[0]) if row is not None else burst
            wait = max((cost - tokens) / rate, 1e-6)
    _takes += 1
    if _takes % PRUNE_EVERY == 0:
        prune(now)
    return wait


def prune(now: float | None = None) -> int:
    """Delete the database buckets that are full again; the number deleted."""
    now = time.time() if now is None else now
    limits: dict[str, tuple[float, float]] = settings.RATE_LIMITS or {}
    deleted = 0
    for scope, (burst, rate) in limits.items():
        refilled = F("tokens") + (Value(now) - F("stamp")) * Value(rate)
        deleted += (
            RateBucket.objects.filter(name__startswith=f"{scope}:")
            .alias(refilled=refilled)
            .filter(refilled__gte=burst)
            .delete()[0]
        )
    return deleted


# --- Redis -----------------------------------------------------------------------------------

# KEYS[1] the bucket; ARGV burst, rate, cost, now. Returns the wait, as a string (a Lua number
# would come back as an integer). The bucket expires once it would be full again anyway.
_LUA = """
local burst, rate, cost, now = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]),
    tonumber(ARGV[4])
local held = redis.call('HMGET', KEYS[1], 'tokens', 'stamp')
local tokens, stamp = tonumber(held[1]) or burst, tonumber(held[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - stamp) * rate)
if tokens < cost then
    return tostring((cost - tokens) / rate)
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens - cost), 'stamp',
    tostring(math.max(now, stamp)))
redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate * 1000) + 1000)
return '0'
"""


@functools.cache
def _redis_script(url: str) -> Any:
    """One connection pool (and the registered script) per process and URL."""
    import redis

    timeout = float(settings.DATABASE_TIMEOUT)
    client = redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
    return client.register_script(_LUA)


def _take_redis(url: str, key: str, burst: float, rate: float, cost: float, now: float) -> float:
    import redis

    try:
        answer = _redis_script(url)(keys=[f"receiptsite:rl:{key}"],
                                    args=[repr(burst), repr(rate), repr(cost), repr(now)])
    except redis.RedisError as error:
        # A rate limit protects the site; it must not take the site down with Redis. The
        # request passes, and the operator reads why in the log.
        logger.error("rate limits are not applied: Redis did not answer (%s)", error)
        return 0.0
    return float(answer)
