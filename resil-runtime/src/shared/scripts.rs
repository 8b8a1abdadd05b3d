//! The Lua scripts: each decision that reads and writes Redis is one script, so it is atomic
//! across instances, and every key a script writes expires when it stops mattering.
//!
//! Times are Redis's own clock (`TIME`, microseconds), so instances whose clocks disagree
//! still agree on a gate. Numbers are written with `%.0f`: Lua's numbers are doubles, exact
//! up to 2^53 µs (285 years), and its default format would round them.

use std::sync::LazyLock;

use redis::Script;

/// Every script's source, for loading them on each cluster node before they are needed.
pub(super) const SOURCES: [&str; 9] = [
    PROBE_LUA,
    OPEN_FOR_LUA,
    OPEN_LUA,
    CLOSE_LUA,
    RELEASE_LUA,
    RESERVE_LUA,
    REFUND_LUA,
    HOLD_LUA,
    WINDOW_LUA,
];

/// The channel breakers' openings and closings, and gates' throttles, are published on.
pub(super) const CHANNEL: &str = "resil:breakers";

/// Asks for the half-open probe. KEYS: the opening, the probe lock. ARGV: this instance,
/// the probe's limit in ms. Returns 0 when this instance probes, else the ms until the
/// peer's opening or probe ends.
pub(super) static PROBE: LazyLock<Script> = LazyLock::new(|| Script::new(PROBE_LUA));
const PROBE_LUA: &str = r"
local open = redis.call('PTTL', KEYS[1])
if open > 0 then return open end
if redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end
local held = redis.call('PTTL', KEYS[2])
if held < 1 then return 1 end
return held
";

/// How long a breaker's opening lasts still, in ms (as `PTTL`): a script, so that a
/// cluster's re-sync finds the script's node and its failures as the others' do. KEYS: the
/// opening.
pub(super) static OPEN_FOR: LazyLock<Script> = LazyLock::new(|| Script::new(OPEN_FOR_LUA));
const OPEN_FOR_LUA: &str = "return redis.call('PTTL', KEYS[1])";

/// Records an opening and tells every instance. KEYS: the opening, the probe lock, the
/// shared window (its calls count for nothing once it opened). ARGV: the cooldown in ms, the
/// message, this instance.
pub(super) static OPEN: LazyLock<Script> = LazyLock::new(|| Script::new(OPEN_LUA));
const OPEN_LUA: &str = r"
redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[1])
redis.call('DEL', KEYS[3])
if redis.call('GET', KEYS[2]) == ARGV[3] then redis.call('DEL', KEYS[2]) end
return redis.call('PUBLISH', 'resil:breakers', ARGV[2])
";

/// Records a closing and tells every instance. KEYS: the opening, the probe lock, the shared
/// window (a closed breaker judges afresh: batches sent while it was open are forgotten).
/// ARGV: the message, this instance.
pub(super) static CLOSE: LazyLock<Script> = LazyLock::new(|| Script::new(CLOSE_LUA));
const CLOSE_LUA: &str = r"
redis.call('DEL', KEYS[1], KEYS[3])
if redis.call('GET', KEYS[2]) == ARGV[2] then redis.call('DEL', KEYS[2]) end
return redis.call('PUBLISH', 'resil:breakers', ARGV[1])
";

/// Gives the probe lock back when the probe ended with no verdict. KEYS: the probe lock.
/// ARGV: this instance.
pub(super) static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE_LUA));
const RELEASE_LUA: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
";

/// GCRA over one or two gates at once (all reserve or none). A gate is a hash: `tat` (its
/// theoretical arrival time), `epoch` (throttles so far) and `held` (the latest throttle's
/// end); beside it, a sorted set of the users of the gate (`instance:user`), scored by their
/// last heartbeat, which counts whether the reservation is granted or refused. KEYS: per
/// gate, the gate and its users. ARGV: the longest wait allowed in µs (-1: any), how long a
/// user counts after its heartbeat in µs, then per gate its interval and tolerance in µs, the
/// cost, the user for a heartbeat (empty: none now), how far past now the slots the
/// instance's local gate granted alone and still holds run, in µs (0: none; else the slot
/// starts no earlier, the schedule before it still the one found), and how far those whose
/// calls were made run (the schedule before the slot runs at least that far). Returns `{0, wait, users, users}`
/// (refused; the wait it would have been, and each gate's users seen, 0 without a
/// heartbeat) or `{1, wait}` (reserved; µs until the slot) followed, per gate, by the slot:
/// the schedule before it and after it, the epoch, how far after now it ends, and the users
/// seen (0 without a heartbeat).
pub(super) static RESERVE: LazyLock<Script> = LazyLock::new(|| Script::new(RESERVE_LUA));
const RESERVE_LUA: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local limit = tonumber(ARGV[1])
local since = tonumber(ARGV[2])
local instances = {}
for i = 1, #KEYS / 2 do
  local seen, beat = KEYS[2 * i], ARGV[(i - 1) * 6 + 6]
  instances[i] = 0
  if beat ~= '' then
    redis.call('ZADD', seen, now, beat)
    redis.call('ZREMRANGEBYSCORE', seen, '-inf', string.format('(%.0f', now - since))
    redis.call('PEXPIRE', seen, string.format('%.0f', math.ceil(since / 1000)))
    instances[i] = redis.call('ZCARD', seen)
  end
end
local longest = 0
local slots = {}
for i = 1, #KEYS / 2 do
  local key = KEYS[2 * i - 1]
  local at = (i - 1) * 6 + 2
  local interval, tolerance, cost = tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3])
  local alone, used = tonumber(ARGV[at + 5]), tonumber(ARGV[at + 6])
  local state = redis.call('HMGET', key, 'tat', 'epoch')
  local from = tonumber(state[1]) or now
  if used > 0 and from < now + used then from = now + used end
  local tat = from
  if alone > 0 and tat < now + alone then tat = now + alone end
  if tat < now then tat = now end
  local next = tat + interval * cost
  local wait = next - tolerance - now
  if wait < 0 then wait = 0 end
  if limit >= 0 and wait > limit then
    return {'0', string.format('%.0f', wait), instances[1], instances[2] or 0}
  end
  slots[i] = {from, next, tonumber(state[2]) or 0}
  if wait > longest then longest = wait end
end
local reply = {'1', string.format('%.0f', longest)}
for i = 1, #KEYS / 2 do
  local key = KEYS[2 * i - 1]
  local slot = slots[i]
  redis.call('HSET', key, 'tat', string.format('%.0f', slot[2]))
  redis.call('PEXPIRE', key, string.format('%.0f', math.max(1, math.ceil((slot[2] - now) / 1000))))
  for _, value in ipairs({slot[1], slot[2], slot[3], slot[2] - now, instances[i]}) do
    table.insert(reply, string.format('%.0f', value))
  end
end
return reply
";

/// Gives a slot back, reserved but not used, unless a throttle revoked it: while it is the
/// latest promised, the schedule returns to its start, then past the stretch given back
/// before it; a slot in the middle of the queue joins the stretches given back ('given': up
/// to 256 `from:end` pairs, adjoining slots merged, those past forgotten, the one nearest now
/// dropped first) until the schedule returns to its end. So a queue of callers that all give
/// up, in any order, gives the gate back. KEYS: the gate. ARGV: the schedule after the slot
/// and before it, its epoch.
pub(super) static REFUND: LazyLock<Script> = LazyLock::new(|| Script::new(REFUND_LUA));
const REFUND_LUA: &str = r"
local state = redis.call('HMGET', KEYS[1], 'tat', 'epoch', 'given')
if not state[1] or (state[2] or '0') ~= ARGV[3] then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local given = {}
for from, ends in string.gmatch(state[3] or '', '(%d+):(%d+)') do
  if tonumber(ends) > now then table.insert(given, {from, ends}) end
end
local function find(side, value)
  for i, stretch in ipairs(given) do
    if stretch[side] == value then return i end
  end
end
local back = 0
if state[1] ~= ARGV[1] then
  if tonumber(ARGV[1]) < tonumber(state[1]) and tonumber(ARGV[1]) > now then
    local before, after = find(2, ARGV[2]), find(1, ARGV[1])
    if before and after then
      given[before][2] = given[after][2]
      table.remove(given, after)
    elseif before then
      given[before][2] = ARGV[1]
    elseif after then
      given[after][1] = ARGV[2]
    else
      if #given >= 256 then
        local nearest = 1
        for i, stretch in ipairs(given) do
          if tonumber(stretch[2]) < tonumber(given[nearest][2]) then nearest = i end
        end
        if tonumber(given[nearest][2]) < tonumber(ARGV[1]) then table.remove(given, nearest) end
      end
      if #given < 256 then table.insert(given, {ARGV[2], ARGV[1]}) end
    end
  end
else
  local tat = ARGV[2]
  local before = find(2, tat)
  if before then
    tat = given[before][1]
    table.remove(given, before)
  end
  local kept = {}
  for _, stretch in ipairs(given) do
    if tonumber(stretch[2]) < tonumber(tat) then table.insert(kept, stretch) end
  end
  given = kept
  redis.call('HSET', KEYS[1], 'tat', tat)
  redis.call('PEXPIRE', KEYS[1], string.format('%.0f', math.max(1, math.ceil((tonumber(tat) - now) / 1000))))
  back = 1
end
if #given == 0 then
  redis.call('HDEL', KEYS[1], 'given')
else
  local kept = {}
  for _, stretch in ipairs(given) do table.insert(kept, stretch[1] .. ':' .. stretch[2]) end
  redis.call('HSET', KEYS[1], 'given', table.concat(kept, ';'))
end
return back
";

/// A provider throttled a call: no slot for anyone before its wait is over, then the steady
/// rate; slots already promised, by any instance, are revoked, and every instance hears it.
/// A wait that ends before an earlier throttle's changes nothing; a short one still counts
/// the slots already used (the schedule, up to now plus the burst). KEYS: the gate. ARGV: the
/// wait, the tolerance and the interval, in µs, then the message to publish.
pub(super) static HOLD: LazyLock<Script> = LazyLock::new(|| Script::new(HOLD_LUA));
const HOLD_LUA: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local held = now + tonumber(ARGV[1])
if (tonumber(redis.call('HGET', KEYS[1], 'held')) or 0) >= held then return 0 end
local tat = held + tonumber(ARGV[2]) - tonumber(ARGV[3])
local used = math.min(tonumber(redis.call('HGET', KEYS[1], 'tat')) or 0, now + tonumber(ARGV[2]))
if used > tat then tat = used end
redis.call('HSET', KEYS[1], 'tat', string.format('%.0f', tat), 'held', string.format('%.0f', held))
redis.call('HINCRBY', KEYS[1], 'epoch', 1)
redis.call('HDEL', KEYS[1], 'given')
redis.call('PEXPIRE', KEYS[1], string.format('%.0f', math.max(1, math.ceil((math.max(tat, held) - now) / 1000))))
redis.call('PUBLISH', 'resil:breakers', ARGV[4])
return 1
";

/// Adds an instance's batch of calls to a shared breaker's time window and returns the
/// window's sums. The window is a hash of buckets on Redis's clock: `c{n}` and `b{n}`, the
/// calls and bad calls of bucket `n` (the `n`th bucket width since the epoch); the buckets
/// the window has passed are deleted as they are met, and the hash expires a window after its
/// last batch. KEYS: the window. ARGV: the bucket width in µs, the buckets in a window, the
/// batch's calls and bad calls, the expiry in ms. Returns `{calls, bad}`.
pub(super) static WINDOW: LazyLock<Script> = LazyLock::new(|| Script::new(WINDOW_LUA));
const WINDOW_LUA: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local head = math.floor(now / tonumber(ARGV[1]))
local oldest = head - tonumber(ARGV[2]) + 1
local bucket = string.format('%.0f', head)
if tonumber(ARGV[3]) > 0 then redis.call('HINCRBY', KEYS[1], 'c' .. bucket, ARGV[3]) end
if tonumber(ARGV[4]) > 0 then redis.call('HINCRBY', KEYS[1], 'b' .. bucket, ARGV[4]) end
local fields = redis.call('HGETALL', KEYS[1])
local calls, bad = 0, 0
for i = 1, #fields, 2 do
  local n = tonumber(string.sub(fields[i], 2))
  if n == nil or n < oldest then
    redis.call('HDEL', KEYS[1], fields[i])
  elseif string.sub(fields[i], 1, 1) == 'c' then
    calls = calls + tonumber(fields[i + 1])
  else
    bad = bad + tonumber(fields[i + 1])
  end
end
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return {calls, bad}
";
