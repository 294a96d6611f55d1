#!/usr/bin/python3
"""redis-py (Debian's python3-redis) against `strata kv serve`: the parts of
Redis that clients need (issue 25). Run by compat.rs with the port; exits
non-zero with a message on the first check that fails.

- the default pipeline (transaction=True: MULTI ... EXEC) applies its
  commands together; one with a command the server refuses applies
  nothing and raises;
- MULTI / DISCARD by hand drops what was queued;
- SCAN (scan_iter with MATCH and COUNT) and KEYS over 3,000 keys;
- SETEX, SET PX, GETEX, GETDEL, TTL, TYPE, PERSIST: keys expire;
- INFO is honest (strata_version, no redis_version, a real keyspace
  line); CONFIG SET is refused.
"""

import sys
import time

import redis

port = int(sys.argv[1])
r = redis.Redis(port=port)


def check(cond, what):
    if not cond:
        print("FAILED:", what)
        sys.exit(1)


r.flushall()

# The default pipeline is a transaction.
pipe = r.pipeline()
pipe.set("p:a", "1").set("p:b", "2").get("p:a")
res = pipe.execute()
check(res == [True, True, b"1"], f"pipeline results {res}")
check(r.mget("p:a", "p:b") == [b"1", b"2"], "pipeline applied")

# A refused command aborts the whole transaction: nothing applied.
pipe = r.pipeline()
pipe.set("p:c", "3")
pipe.execute_command("NOSUCHCOMMAND", "x")
pipe.set("p:d", "4")
try:
    pipe.execute()
    check(False, "a pipeline with an unknown command did not raise")
except redis.exceptions.ResponseError as e:
    check("unknown command" in str(e), f"the error names the command: {e}")
check(r.exists("p:c", "p:d") == 0, "a command of an aborted transaction was applied")

# A runtime error is reported, the other commands run (as in Redis).
pipe = r.pipeline()
pipe.set("p:e", "5")
pipe.getex("p:e", ex=30)
res = pipe.execute()
check(res == [True, b"5"] and 0 < r.ttl("p:e") <= 30, f"GETEX in a pipeline {res}")

# MULTI / DISCARD by hand, on one connection (raw replies: redis-py's
# reply callbacks would read +QUEUED as a failed SET).
one = redis.Redis(port=port, single_connection_client=True)


def raw(*args):
    one.connection.send_command(*args)
    return one.connection.read_response()


check(raw("MULTI") == b"OK", "MULTI")
check(raw("SET", "d:x", "1") == b"QUEUED", "queued")
check(raw("DISCARD") == b"OK", "DISCARD")
check(one.get("d:x") is None, "DISCARD applied what it should drop")
try:
    one.execute_command("EXEC")
    check(False, "EXEC without MULTI did not raise")
except redis.exceptions.ResponseError as e:
    check("EXEC without MULTI" in str(e), str(e))

# A non-transactional pipeline still works.
pipe = r.pipeline(transaction=False)
for i in range(100):
    pipe.set(f"nt:{i}", i)
check(all(pipe.execute()), "pipeline(transaction=False)")

# SCAN and KEYS over 3,000 keys.
pipe = r.pipeline()
for i in range(3000):
    pipe.set(f"scan:{i}", i)
pipe.execute()
seen = set(r.scan_iter(match="scan:*", count=137))
check(seen == {f"scan:{i}".encode() for i in range(3000)}, f"scan_iter found {len(seen)} of 3000")
tens = set(r.scan_iter(match="scan:1?", count=10))
check(tens == {f"scan:1{i}".encode() for i in range(10)}, f"MATCH scan:1? found {sorted(tens)}")
check(len(r.keys("scan:*")) == 3000, "KEYS scan:*")
check(sorted(r.keys("scan:29[0-9]")) == sorted(f"scan:29{i}".encode() for i in range(10)), "KEYS with a class")

# Expiry.
check(r.setex("t:s", 1, "v") is True, "SETEX")
check(r.set("t:p", "v", px=300) is True, "SET PX")
check(0 < r.ttl("t:s") <= 1, f"TTL {r.ttl('t:s')}")
check(0 < r.pttl("t:p") <= 300, f"PTTL {r.pttl('t:p')}")
check(r.type("t:s") == b"string" and r.type("t:none") == b"none", "TYPE")
r.set("t:g", "keep")
check(r.getex("t:g", px=200) == b"keep", "GETEX PX")
r.set("t:k", "kept")
check(r.expire("t:k", 1) is True and r.persist("t:k") is True and r.ttl("t:k") == -1, "EXPIRE, PERSIST")
info = r.info("keyspace")
check(info["db0"]["expires"] >= 3, f"INFO keyspace expires: {info}")
time.sleep(1.3)
check(r.get("t:s") is None and r.get("t:p") is None and r.get("t:g") is None, "expired keys are misses")
check(r.get("t:k") == b"kept", "a persisted key stays")
r.set("t:d", "once")
check(r.getdel("t:d") == b"once" and r.getdel("t:d") is None, "GETDEL")

# INFO and CONFIG.
info = r.info()
check("strata_version" in info and "redis_version" not in info, f"INFO server fields: {sorted(info)[:20]}")
check(info["db0"]["keys"] == r.dbsize(), f"INFO keys {info['db0']} vs DBSIZE {r.dbsize()}")
check(int(r.config_get("maxmemory")["maxmemory"]) > 0, "CONFIG GET maxmemory")
try:
    r.config_set("maxmemory", "1")
    check(False, "CONFIG SET did not raise")
except redis.exceptions.ResponseError as e:
    check("not supported" in str(e), str(e))

print("redis-py: all checks passed")
