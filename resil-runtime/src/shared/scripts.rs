//! The Lua scripts: each decision that reads and writes Redis is one script, so it is atomic
//! across instances, and every key a script writes expires when it stops mattering.
//!
//! Times are Redis's own clock (`TIME`, microseconds), so instances whose clocks disagree
//! still agree on a gate. Numbers are written with `%.0f`: Lua's numbers are doubles, exact
//! up to 2^53 µs (285 years), and its default format would round them.

use std::sync::LazyLock;

use redis::Script;

/// The channel breakers' openings and closings are published on.
pub(super) const CHANNEL: &str = "resil:breakers";

/// Asks for the half-open probe. KEYS: the opening, the probe lock. ARGV: this instance,
/// the probe's limit in ms. Returns 0 when this instance probes, else the ms until the
/// peer's opening or probe ends.
pub(super) static PROBE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local open = redis.call('PTTL', KEYS[1])
if open > 0 then return open end
if redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end
local held = redis.call('PTTL', KEYS[2])
if held < 1 then return 1 end
return held
",
    )
});

/// Records an opening and tells every instance. KEYS: the opening, the probe lock. ARGV: the
/// cooldown in ms, the message, this instance.
pub(super) static OPEN: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[1])
if redis.call('GET', KEYS[2]) == ARGV[3] then redis.call('DEL', KEYS[2]) end
return redis.call('PUBLISH', 'resil:breakers', ARGV[2])
",
    )
});

/// Records a closing and tells every instance. KEYS: the opening, the probe lock. ARGV: the
/// message, this instance.
pub(super) static CLOSE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
redis.call('DEL', KEYS[1])
if redis.call('GET', KEYS[2]) == ARGV[2] then redis.call('DEL', KEYS[2]) end
return redis.call('PUBLISH', 'resil:breakers', ARGV[1])
",
    )
});

/// Gives the probe lock back when the probe ended with no verdict. KEYS: the probe lock.
/// ARGV: this instance.
pub(super) static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
",
    )
});

/// GCRA over one or two gates at once (all reserve or none). KEYS: the gates. ARGV: the
/// longest wait allowed in µs (-1: any), then per gate its interval and tolerance in µs and
/// the cost. Returns `{1, wait}` (reserved; µs until the slot) or `{0, wait}` (refused; the
/// wait it would have been).
pub(super) static RESERVE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local limit = tonumber(ARGV[1])
local longest = 0
local nexts = {}
for i, key in ipairs(KEYS) do
  local at = (i - 1) * 3 + 1
  local interval, tolerance, cost = tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3])
  local tat = tonumber(redis.call('GET', key)) or now
  if tat < now then tat = now end
  local next = tat + interval * cost
  local wait = next - tolerance - now
  if wait < 0 then wait = 0 end
  if limit >= 0 and wait > limit then return {0, string.format('%.0f', wait)} end
  nexts[i] = next
  if wait > longest then longest = wait end
end
for i, key in ipairs(KEYS) do
  redis.call('SET', key, string.format('%.0f', nexts[i]), 'PX', string.format('%.0f', math.max(1, math.ceil((nexts[i] - now) / 1000))))
end
return {1, string.format('%.0f', longest)}
",
    )
});

/// Gives back units reserved but not used. KEYS: the gate. ARGV: the units' length in µs.
pub(super) static REFUND: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local tat = tonumber(redis.call('GET', KEYS[1]))
if not tat then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
tat = tat - tonumber(ARGV[1])
if tat <= now then return redis.call('DEL', KEYS[1]) end
redis.call('SET', KEYS[1], string.format('%.0f', tat), 'PX', string.format('%.0f', math.max(1, math.ceil((tat - now) / 1000))))
return 1
",
    )
});

/// A provider throttled a call: no slot for anyone before its wait is over, then the steady
/// rate. KEYS: the gate. ARGV: the wait, the tolerance and the interval, in µs.
pub(super) static HOLD: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local held = now + tonumber(ARGV[1]) + tonumber(ARGV[2]) - tonumber(ARGV[3])
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if held <= tat or held <= now then return 0 end
redis.call('SET', KEYS[1], string.format('%.0f', held), 'PX', string.format('%.0f', math.max(1, math.ceil((held - now) / 1000))))
return 1
",
    )
});
