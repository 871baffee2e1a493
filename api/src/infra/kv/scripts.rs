//! The Lua scripts that make each compound Redis operation one atomic round trip. Every key
//! one script touches shares a hash slot (its name carries the same `{hash tag}`), so each
//! runs unchanged on Redis Cluster.

// GCRA on Redis' own clock (replicas may disagree about the time; Redis does not).
// KEYS[1] holds the theoretical arrival time in µs. ARGV: emission interval, window (µs).
// Returns {allowed, retry_after_us, reset_us}. Microseconds, because a high limit's
// interval is under a millisecond (1,000,000 a minute: 60 µs): counted in ms it rounded to
// 0 and the key's expiry, `PX 0`, was an error. The expiry is whole ms, at least 1.
pub(super) const GCRA: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local new_tat = tat + interval
local allow_at = new_tat - window
if now < allow_at then
  return {0, allow_at - now, tat - now}
end
redis.call('SET', KEYS[1], string.format('%.0f', new_tat), 'PX', math.max(1, math.ceil((new_tat - now) / 1000)))
return {1, 0, new_tat - now}
"#;

// Deletes a lock only if this holder still owns it.
pub(super) const DEL_IF_EQ: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"#;

// A lock's lease renewed by its holder: the expiry moves only while it still holds it.
pub(super) const EXTEND_IF_EQ: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"#;

// A recent response copy if there is one; only when there is none, the in-flight lock. One
// round trip where a GET and a SET NX took two. KEYS: copy, lock. ARGV: token, ttl (ms).
pub(super) const COPY_OR_LOCK: &str = r#"
local v = redis.call('GET', KEYS[1])
if v then return {'copy', v} end
if redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then return {'locked'} end
return {'held'}
"#;

// Stores the response copy, then releases the lock if this holder still owns it.
// KEYS: lock, then the copy if any. ARGV: token, ttl (ms), then the copy's value.
pub(super) const COPY_AND_RELEASE: &str = r#"
if KEYS[2] then redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[2]) end
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 1
"#;

/// A script, hashed once per process (EVALSHA, falling back to EVAL after a Redis restart).
pub(super) fn script(
    cell: &'static std::sync::OnceLock<redis::Script>,
    src: &str,
) -> &'static redis::Script {
    cell.get_or_init(|| redis::Script::new(src))
}

macro_rules! script {
    ($src:expr) => {{
        static CELL: std::sync::OnceLock<redis::Script> = std::sync::OnceLock::new();
        script(&CELL, $src)
    }};
}

// Fixed window counter: INCR, set the expiry on the first hit, return count and ms left.
pub(super) const INCR_WINDOW: &str = r#"
local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
local ttl = redis.call('PTTL', KEYS[1])
return {n, ttl}
"#;

// Keeps the greater of the stored value and ARGV[1] (equal-width text, so text order is
// the values' order), and renews the expiry. KEYS: the key. ARGV: value, ttl (ms).
pub(super) const KEEP_GREATER: &str = r#"
local v = redis.call('GET', KEYS[1])
if v and v >= ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"#;

// Trailing failure windows: one sorted set per window of failures scored by the time (µs
// on Redis' clock). KEYS: the windows (one hash slot). ARGV[1]: a failure to record in every
// window ('' only counts), then per window its threshold and length (µs). Returns per window
// its count and, at or past the threshold, the µs until it falls below it again (else -1).
pub(super) const FAILURE_WINDOWS: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local out = {}
for i, k in ipairs(KEYS) do
  local threshold = tonumber(ARGV[2 * i])
  local window = tonumber(ARGV[2 * i + 1])
  redis.call('ZREMRANGEBYSCORE', k, '-inf', now - window)
  if ARGV[1] ~= '' then
    redis.call('ZADD', k, now, string.format('%.0f', now) .. ' ' .. ARGV[1])
    redis.call('PEXPIRE', k, math.ceil(window / 1000))
  end
  local n = redis.call('ZCARD', k)
  local wait = -1
  if n >= threshold then
    local e = redis.call('ZRANGE', k, n - threshold, n - threshold, 'WITHSCORES')
    wait = tonumber(e[2]) + window - now
  end
  out[2 * i - 1] = n
  out[2 * i] = math.max(wait, -1)
end
return out
"#;

// The newest failures of a window, newest first. KEYS: the window. ARGV: its length (µs),
// how many.
pub(super) const RECENT_FAILURES: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
return redis.call('ZREVRANGEBYSCORE', KEYS[1], '+inf', now - tonumber(ARGV[1]), 'LIMIT', 0, tonumber(ARGV[2]))
"#;
