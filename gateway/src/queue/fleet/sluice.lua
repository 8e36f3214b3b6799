#!lua name=sluice_7
--[[
Sluice's waiting rooms on Redis: every change to a room goes through one of
these Functions, so each is atomic, and each reads Redis's own clock (TIME).

The library and every function carry a version (`sluice_7`): a change of a
function's arguments or of the keys' layout makes a new version, so during a
rolling upgrade the old gateways keep calling their own library (FUNCTION
LOAD REPLACE of one version never removes another's functions). Both
versions then share the room's keys, so a layout change also needs its own
key prefix.

Keys of room R, under one hash tag so Redis Cluster keeps a room on one slot
(prefix "sluice2": sluice_2 changed what the slots hold, so its rooms do not
share keys with sluice_1's; sluice_3 to sluice_7 only
added keys, fields and arguments (the fleet's adaptive rate; the re-seeding
of slots and the lost_* fields after Redis lost a room; the fleet's
per-client join limit and its published limits; one place per account and
passes that end fleet-wide; the fair-start draw's fs_* fields, which an
older tick ignores: see "The fair-start draw" below), which the older
versions ignore, so all share the "sluice2" keys and a rolling upgrade
keeps the line):
  sluice2:{R}          HASH  next (next seq to give), serving (seqs below it are
                             released), tat_us (GCRA of the release),
                             paused, sold_out (0/1), version (bumped by
                             set_state), born_ms (when this hash was made: see
                             WARM_UP_MS), shows / no_shows (released places
                             collected / never collected, totals), hold_ms
                             (mean time a pass held its slot); for an
                             adaptive room, the decision in force: ad_rate
                             (exact, per second), ad_reason, ad_at_ms,
                             ad_state (the law's whole state, JSON), ad_by (the
                             gateway that took it); lost_from / lost_below /
                             lost_until_ms / lost_pending / lost_kept (after
                             Redis lost the room: the places released before
                             whose claim window was still open, from
                             lost_from (the lowest `serving` the gateways saw
                             one claim window before the loss) to lost_below;
                             until when their holders may still collect them;
                             how many were uncollected as the gateways last
                             saw: they still count as pending until then; and
                             how many of those Redis kept in :released, so
                             counted there already)
  sluice2:{R}:slots    ZSET  the max_active slots: "c<seq>" a collected pass;
                             score = unix ms at which its slot is free again
  sluice2:{R}:released ZSET  released places not collected yet: "u<seq>";
                             score = unix ms at which its claim window ends
  sluice2:{R}:spent    SET   after Redis lost the room: the places the gateways
                             re-seeded as spent (a pass given back, a place
                             answered gone), never taken back; expires with
                             the take-back window
  sluice2:{R}:checkouts STREAM each adaptive gateway's checkouts of the
                             last second, one entry a batch ("b"), trimmed
                             to HORIZON_MS, gone 2 x HORIZON_MS after the
                             last
  sluice2:{R}:leader   STRING the gateway that steps the adaptive rate,
                             expiring (PX) unless it steps again
  sluice2:{R}:limits   HASH  gateway id -> "<unix ms> <rate> <burst>
                             <max_active> <queue_capacity>" its config gives
                             the room, renewed by each of its ticks (the room
                             runs at the smallest live ones: fleet_limits);
                             the room hash keeps lim_max_active and
                             lim_capacity
  sluice2:{R}:jl:<client> STRING a client's join allowance (GCRA: its
                             theoretical arrival time, unix us), expiring
                             (PX) when the allowance is whole again (one
                             period per join within the burst, at most
                             burst x period = 60 s)

And one key for the fleet itself (its own slot in Redis Cluster):
  sluice:fleet      HASH  gateway id -> "<unix ms last seen> <region>"

Nothing is kept per waiting shopper: a place is its seq, and the ticket
(signed by the gateway) carries it. The one record per client, its join
allowance, lives only while it is not whole again.
]]

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- A room hash made just now (a new room, or a Redis restarted without its
-- data) takes no joins for this long: every gateway's tick pushes the highest
-- numbers it saw first, so a place one gateway gave is not given again by
-- another that never saw it.
local WARM_UP_MS = 2000
-- After a loss, slots stay held past WARM_UP_MS until every gateway the
-- fleet saw alive has re-seeded its passes (reseed_hold), but never longer
-- than this: a gateway that died with Redis does not hold the line.
local WARM_UP_MAX_MS = 10000

local function num(v)
  return tonumber(v) or 0
end

-- Whether the slots of room `key`, (re)made at `born`, are still held
-- after a loss: the gateways re-seeded so far (reseeded_n) are fewer than
-- the live gateways any of them counts (members_seen).
local function reseed_hold(key, born, ms)
  local v = redis.call('HMGET', key, 'rs_born', 'reseeded_n', 'members_seen')
  return num(v[1]) == born and ms - born < WARM_UP_MAX_MS and num(v[2]) < num(v[3])
end

-- The room's numbers, with the high-water marks a gateway pushes: a Redis
-- restarted empty never gives a seq twice, un-releases a place nor lets
-- the release run ahead of its pace (hw_tat_us: the GCRA's theoretical
-- arrival time only ever goes up). r.lost is set when the marks show that
-- Redis lost released places (serving went back).
local function load(key, hw_next, hw_serving, hw_tat_us, ms)
  local v = redis.call('HMGET', key, 'next', 'serving', 'tat_us', 'paused', 'sold_out', 'version',
    'born_ms')
  local r = {
    next = num(v[1]), serving = num(v[2]), tat_us = num(v[3]),
    paused = num(v[4]), sold_out = num(v[5]), version = num(v[6]), born_ms = tonumber(v[7]) or ms,
    lost = false,
  }
  -- A gateway that saw more than Redis holds means Redis lost writes (a
  -- restart without them, a failover to a replica behind): warm up again,
  -- so every gateway's numbers (and the slots of its passes: reseed) land
  -- before a place is given or released.
  if hw_next > r.next or hw_serving > r.serving then
    r.born_ms = ms
    -- Count the gateways' re-seeds from here (reseed_hold).
    redis.call('HSET', key, 'rs_born', string.format('%d', ms), 'reseeded_n', 0, 'members_seen', 0)
  end
  if hw_next > r.next then r.next = hw_next end
  if hw_serving > r.serving then
    r.serving = hw_serving
    r.lost = true
  end
  if r.serving > r.next then r.next = r.serving end
  if hw_tat_us > r.tat_us then r.tat_us = hw_tat_us end
  return r
end

-- The limits of a room as the gateways' configs give them: each tick
-- publishes its caller's (rate, or for an adaptive room its max_per_second;
-- burst; max_active; queue_capacity) in the hash sluice2:{R}:limits under
-- the caller's id, and the room runs at the smallest of those published
-- within LIMITS_LIVE_MS: while a reload rolls over the fleet (or when the
-- files differ) no gateway's limit is passed, and a raised limit is in
-- force once every live gateway has it. The smallest max_active and
-- queue_capacity are kept in the room hash (lim_max_active, lim_capacity)
-- for claim and join. Entries not renewed for LIMITS_KEEP_MS are removed.
local LIMITS_LIVE_MS = 3000
local LIMITS_KEEP_MS = 60000

-- -> the limits, and the ids of the gateways that give a smaller one than
--    the caller's (space-separated).
local function fleet_limits(key, id, ms, mine)
  redis.call('HSET', key, id, string.format('%d %d %d %d %d', ms, mine[1], mine[2], mine[3], mine[4]))
  redis.call('PEXPIRE', key, LIMITS_KEEP_MS)
  local lim = {mine[1], mine[2], mine[3], mine[4]}
  local tighter = {}
  local all = redis.call('HGETALL', key)
  for i = 1, #all, 2 do
    local f = {}
    for v in string.gmatch(all[i + 1], '%d+') do f[#f + 1] = tonumber(v) end
    -- A later version may append numbers: the first five are these. An
    -- entry dated ahead of Redis's clock (a failover to a replica whose
    -- clock is behind) is not taken as live.
    if #f < 5 or ms - f[1] > LIMITS_KEEP_MS then
      redis.call('HDEL', key, all[i])
    elseif ms - f[1] <= LIMITS_LIVE_MS and f[1] - ms <= LIMITS_LIVE_MS then
      local below = false
      for j = 1, 4 do
        if f[j + 1] < mine[j] then below = true end
        lim[j] = math.min(lim[j], f[j + 1])
      end
      if below then tighter[#tighter + 1] = all[i] end
    end
  end
  return lim, table.concat(tighter, ' ')
end

-- A room hash field read as a limit, or `fallback` when there is none.
local function limit_or(key, field, fallback)
  local v = tonumber(redis.call('HGET', key, field))
  if v and v > 0 then return math.min(v, fallback) end
  return fallback
end

-- The per-client join limit of the fleet: a GCRA per client (`sluice_admission::
-- join_limiter::fleet_client_join`, the same integer arithmetic): a client may join
-- `burst` times at once, then once per `period_us`. State: the key
-- sluice2:{R}:jl:<client> holds the client's theoretical arrival time (unix
-- us) and expires when the allowance is whole again, so Redis keeps a client
-- for at most burst x period (60 s) after its last join.
-- -> new TAT (0 when refused), retry after (us, 0 when allowed)
local function client_join(tat_us, now, period_us, burst)
  local next_tat = math.max(tat_us, now) + period_us
  local over = next_tat - now - burst * period_us
  if over > 0 then
    return 0, over
  end
  return next_tat, 0
end

--[[ The fair-start draw (a room with `opens_at`), in fields of the room hash:
  fs_opens_ms  the opening (unix ms), by Redis's clock
  fs_first     the first pre-queue seq: the pre-queue's tickets are the seqs
               fs_first .. fs_first + fs_n - 1, in arrival order
  fs_seed      the seed (64 hex digits), fs_commit its SHA-256 (hex): the
               gateways publish the commitment before the opening and the
               seed only once fs_n is set
  fs_n         the entrants, frozen by the first join, tick or draw call at
               or after fs_opens_ms (absent before: the pre-queue still
               takes joins, and the tick releases nothing)
  fs_known     1 once a gateway that had seen the draw pushed it
Set by the first sluice_7_draw (each gateway proposes a seed of its own: the
first stored stands); every gateway pushes back the draw it saw, so a Redis
that lost the room gets the same draw again. Redis keeps nothing per
entrant: each gateway computes the places with
sluice_admission::fair_start::draw_order(seed, fs_n) and asks for places,
which the line releases in order as it releases any seq.
]]

-- Whether the line of room `key` may move at `ms` (its `next` is `next`):
-- it has no draw, or the draw's pre-queue is frozen (frozen now, if the
-- opening has come).
local function draw_opened(key, ms, next)
  local v = redis.call('HMGET', key, 'fs_opens_ms', 'fs_first', 'fs_n')
  if not v[1] or v[3] then return true end
  if ms < num(v[1]) then return false end
  redis.call('HSET', key, 'fs_n', string.format('%d', math.max(0, next - num(v[2]))))
  return true
end

-- FCALL sluice_7_draw 1 <room> <opens_at_ms> <first> <seed> <commitment>
--       <entrants> <hw_next>
-- A gateway's view of the room's draw: the draw it saw (<first>, <seed>,
-- <commitment>, <entrants> as last answered here, "" for <first> and
-- <entrants> when not known), or, having seen none, a seed of its own
-- with <first> "". With no draw stored, the proposal is stored (<first>
-- "": the room's `next`, or <hw_next> if higher); a draw stored by a gateway that had seen none
-- (fs_known unset: after Redis lost the room, the first caller may be one
-- that just started) gives way to one pushed by a gateway that had seen
-- it. Then the pre-queue is frozen if the opening has come.
-- -> {opens_ms, first, seed, commitment, entrants ("" before the opening),
--     now_ms} (all strings)
local function draw(keys, args)
  local key = keys[1]
  local ms = now_ms()
  local pushed_first = tonumber(args[2])
  local opens = tonumber(args[1]) or 0
  local stored = redis.call('HMGET', key, 'fs_commit', 'fs_known', 'fs_seed', 'fs_first',
    'fs_opens_ms')
  local stored_opens = num(stored[5])
  local replace = not stored[1]
  if stored[1] and opens > stored_opens and ms >= stored_opens then
    -- A later event in the same room (its opening set after the stored
    -- draw's had come): a draw of its own, from the line's `next`. Without
    -- this the old, revealed draw would stand and the new pre-queue be
    -- released as it came.
    replace = true
  elseif stored[1] and stored[2] ~= '1' and pushed_first then
    if stored[3] == args[3] and num(stored[4]) == pushed_first then
      -- The stored draw is the one this gateway saw: known from now on.
      redis.call('HSET', key, 'fs_known', 1)
    elseif opens >= stored_opens then
      replace = true
    end
    -- (A gateway still configured with an earlier opening never brings
    -- its event's draw back over a later one.)
  end
  if replace then
    local first = pushed_first
      or math.max(num(redis.call('HGET', key, 'next')), tonumber(args[6]) or 0)
    redis.call('HSET', key, 'fs_opens_ms', args[1], 'fs_first', string.format('%d', first),
      'fs_seed', args[3], 'fs_commit', args[4])
    if pushed_first then
      redis.call('HSET', key, 'fs_known', 1)
    else
      redis.call('HDEL', key, 'fs_known')
    end
    local n = tonumber(args[5])
    if n then
      redis.call('HSET', key, 'fs_n', string.format('%d', n))
      if num(redis.call('HGET', key, 'next')) < first + n then
        redis.call('HSET', key, 'next', string.format('%d', first + n))
      end
    else
      redis.call('HDEL', key, 'fs_n')
    end
  end
  local next = math.max(num(redis.call('HGET', key, 'next')), tonumber(args[6]) or 0)
  draw_opened(key, ms, next)
  local v = redis.call('HMGET', key, 'fs_opens_ms', 'fs_first', 'fs_seed', 'fs_commit', 'fs_n')
  return {v[1], v[2], v[3], v[4], v[5] or '', string.format('%d', ms)}
end

-- FCALL sluice_7_join 1+k <room> <client keys 1..k>
--       <n> <capacity> <hw_next> <period_us> <burst> <client index 1..n>
-- Gives up to n consecutive seqs (fewer when the line would pass capacity,
-- the smallest the live gateways' configs give: lim_capacity) to the joins
-- within their client's limit, in batch order. Join i's
-- client is KEYS[1 + index_i] (index 0: no client known, no limit). A join
-- over its client's limit takes nothing and is answered its wait; while the
-- room warms up nothing is counted.
-- -> {first, granted, serving, paused, sold_out, warming,
--     retry_after_ms_1 .. retry_after_ms_n (0: within the limit)}
local function join(keys, args)
  local n, hw_next = tonumber(args[1]), tonumber(args[3])
  local capacity = limit_or(keys[1], 'lim_capacity', tonumber(args[2]))
  local period_us, burst = tonumber(args[4]), tonumber(args[5])
  local ms = now_ms()
  local r = load(keys[1], hw_next, 0, 0, ms)
  -- At the opening, the pre-queue is frozen before anyone joins after it.
  draw_opened(keys[1], ms, r.next)
  local granted = 0
  local warming = 0
  local limited = {}
  local allowed = n
  if ms - r.born_ms < WARM_UP_MS then
    warming = 1
    for i = 1, n do limited[i] = 0 end
  else
    local now = now_us()
    local tats = {}
    allowed = 0
    for i = 1, n do
      -- Joins past the indices given have no client (no limit).
      local k = tonumber(args[5 + i]) or 0
      limited[i] = 0
      if k == 0 then
        allowed = allowed + 1
      else
        local key = keys[1 + k]
        if tats[key] == nil then tats[key] = num(redis.call('GET', key)) end
        local tat, wait_us = client_join(tats[key], now, period_us, burst)
        if tat == 0 then
          limited[i] = math.max(1, math.ceil(wait_us / 1000))
        else
          tats[key] = tat
          allowed = allowed + 1
        end
      end
    end
    for key, tat in pairs(tats) do
      if tat > now then
        redis.call('SET', key, string.format('%d', tat), 'PX', math.ceil((tat - now) / 1000))
      end
    end
    if r.paused == 0 and r.sold_out == 0 then
      local room_left = capacity - (r.next - r.serving)
      granted = math.max(0, math.min(allowed, room_left))
    end
  end
  local first = r.next
  redis.call('HSET', keys[1], 'next', r.next + granted, 'serving', r.serving, 'born_ms', r.born_ms)
  local out = {first, granted, r.serving, r.paused, r.sold_out, warming}
  for i = 1, n do out[6 + i] = limited[i] end
  return out
end

-- The running mean of how long a pass held its slot (weight 1/32 for the
-- newest), kept in the room's hash as hold_ms (0: none yet).
local function observe_hold(key, held_ms)
  local mean = num(redis.call('HGET', key, 'hold_ms'))
  if mean == 0 then
    mean = held_ms
  else
    mean = mean + (held_ms - mean) / 32
  end
  redis.call('HSET', key, 'hold_ms', string.format('%d', math.floor(mean)))
end

-- The release's pace and the uncollected places that may be out, made up
-- for a no-show share of share_milli (thousandths, at most 500): the same
-- integer arithmetic as sluice_admission::no_show.
local SHARE_MAX_MILLI = 500

local function show_milli(share_milli)
  return 1000 - math.min(share_milli, SHARE_MAX_MILLI)
end

local function interval_us(rate, share_milli)
  return math.max(1, math.ceil(show_milli(share_milli) * 1000 / rate))
end

-- The adaptive decision's fields in the room hash.
local AD_FIELDS = {'ad_rate', 'ad_reason', 'ad_at_ms', 'ad_state', 'ad_by'}

local function stored_decision(key)
  local v = redis.call('HMGET', key, unpack(AD_FIELDS))
  return {v[1] or '', v[2] or '', v[3] or '', v[4] or '', v[5] or ''}
end

-- FCALL sluice_7_tick 4 <room> <slots> <released> <limits> <rate> <burst>
--       <max_active> <claim_window_ms> <hw_next> <hw_serving> <sold_out_seen>
--       <share_milli> <pass_ttl_ms> <adaptive 0/1> <min_per_second>
--       <max_per_second> <hw_tat_us> <members_live> <id> <capacity>
-- The rate, burst and max_active are the smallest the live gateways'
-- configs give (fleet_limits).
-- With adaptive = 1 the release runs at the room's stored decision
-- (ad_rate rounded, inside [min, max], at least 1: the same arithmetic as
-- sluice_admission::fleet_rate::rate_in_force), <rate> only until one is
-- stored; with 0 (a rate pinned by the operator's number) at <rate>, and
-- the stored decision is forgotten.
-- Ends passes that ran out and released places nobody collected within
-- their claim window (no-shows), then releases the next places while the
-- GCRA (rate made up for the no-show share, burst) and the slots allow:
-- an uncollected place takes no slot, it counts as the share expected to
-- come. Any gateway may call it, as often as it likes: the rate comes from
-- TIME, not from the number of calls.
-- After Redis lost the room (serving pushed back up by a gateway's mark),
-- the places released before keep their claim: until the warm-up and one
-- claim window are over, claim takes a place in [lost_from, lost_below)
-- that Redis has no record of as released (see claim). lost_from comes
-- from the gateways' reseeds; until one lands, nothing is taken back.
-- -> {next, serving, passes, pending, paused, sold_out, version, released,
--     now_ms, shows, no_shows, hold_ms, rate, ad_rate, ad_reason, ad_at_ms,
--     ad_state, ad_by, tat_us, born_ms, lim_rate, lim_burst, lim_max_active,
--     lim_capacity, tighter (ids, space-separated)} (the ad_ fields "" when
--     none)
local function tick(keys, args)
  local rate, burst, max_active = tonumber(args[1]), tonumber(args[2]), tonumber(args[3])
  local adaptive = tonumber(args[10]) == 1
  local lo, hi = tonumber(args[11]), tonumber(args[12])
  local us = now_us()
  local ms = math.floor(us / 1000)
  local cap = rate
  if adaptive then cap = math.max(hi, lo) end
  local lim, tighter = fleet_limits(keys[4], args[15], ms, {cap, burst, max_active, tonumber(args[16])})
  burst, max_active = lim[2], lim[3]
  if adaptive then
    local stored = tonumber(redis.call('HGET', keys[1], 'ad_rate'))
    if stored then
      rate = math.max(1, math.min(math.max(hi, lo), math.max(lo, math.floor(stored + 0.5))))
    end
  elseif redis.call('HEXISTS', keys[1], 'ad_rate') == 1 then
    redis.call('HDEL', keys[1], unpack(AD_FIELDS))
  end
  rate = math.max(1, math.min(rate, lim[1]))
  local claim_window_ms = tonumber(args[4])
  local share_milli, ttl = tonumber(args[8]), tonumber(args[9])
  local r = load(keys[1], tonumber(args[5]), tonumber(args[6]), tonumber(args[13]), ms)
  -- Every gateway sees born_ms change and reseeds, so lost_pending starts
  -- again from what they push.
  if r.lost then
    -- Released places Redis still holds (a failover to a replica that
    -- was behind keeps some) are in the gateways' counts too: lost_kept
    -- takes them off, so none is counted twice.
    -- Only those still within their window (the purge below drops the
    -- rest). The take-back lasts the longest hold plus one claim window.
    redis.call('HSET', keys[1], 'lost_below', string.format('%d', r.serving),
      'lost_until_ms', string.format('%d', ms + WARM_UP_MAX_MS + claim_window_ms),
      'lost_pending', 0, 'lost_read_ms', -1,
      'lost_kept', redis.call('ZCOUNT', keys[3], '(' .. string.format('%d', ms), '+inf'))
    redis.call('HDEL', keys[1], 'lost_from')
  end
  if tonumber(args[7]) == 1 and r.sold_out == 0 then
    r.sold_out = 1
    r.version = r.version + 1
  end
  -- Passes that lived their whole life held their slot for it.
  local ended = redis.call('ZCOUNT', keys[2], '-inf', ms)
  for _ = 1, math.min(ended, 64) do observe_hold(keys[1], ttl) end
  redis.call('ZREMRANGEBYSCORE', keys[2], '-inf', ms)
  local no_shows = redis.call('ZREMRANGEBYSCORE', keys[3], '-inf', ms)
  if no_shows > 0 then redis.call('HINCRBY', keys[1], 'no_shows', no_shows) end
  local passes = redis.call('ZCARD', keys[2])
  local pending = redis.call('ZCARD', keys[3])
  local lost = redis.call('HMGET', keys[1], 'lost_pending', 'lost_until_ms', 'lost_kept')
  if ms < num(lost[2]) then pending = pending + math.max(0, num(lost[1]) - num(lost[3])) end
  local released = 0
  -- The live gateways this one counts (its own heartbeat's list).
  if num(redis.call('HGET', keys[1], 'rs_born')) == r.born_ms
      and tonumber(args[14]) > num(redis.call('HGET', keys[1], 'members_seen')) then
    redis.call('HSET', keys[1], 'members_seen', args[14])
  end
  local warming = ms - r.born_ms < WARM_UP_MS or reseed_hold(keys[1], r.born_ms, ms)
  -- Before a fair start's opening nobody is released.
  local opened = draw_opened(keys[1], ms, r.next)
  if not warming and opened and r.paused == 0 and r.sold_out == 0 and r.next > r.serving then
    local step = interval_us(rate, share_milli)
    local tat = math.max(r.tat_us, us)
    local allowed = math.floor((us + burst * step - tat) / step)
    local free = math.max(0, max_active - passes)
    local slots = math.floor(free * 1000 / show_milli(share_milli)) - pending
    released = math.min(allowed, slots, r.next - r.serving)
    if released > 0 then
      for i = 0, released - 1 do
        redis.call('ZADD', keys[3], ms + claim_window_ms, 'u' .. string.format('%d', r.serving + i))
      end
      r.serving = r.serving + released
      r.tat_us = tat + released * step
      pending = pending + released
    else
      released = 0
    end
  end
  redis.call('HSET', keys[1], 'next', r.next, 'serving', r.serving,
    'tat_us', string.format('%d', r.tat_us), 'paused', r.paused, 'sold_out', r.sold_out,
    'version', r.version, 'born_ms', string.format('%d', r.born_ms),
    'lim_max_active', lim[3], 'lim_capacity', lim[4])
  local v = redis.call('HMGET', keys[1], 'shows', 'no_shows', 'hold_ms')
  local d = stored_decision(keys[1])
  return {r.next, r.serving, passes, pending, r.paused, r.sold_out, r.version, released, ms,
    num(v[1]), num(v[2]), num(v[3]), rate, d[1], d[2], d[3], d[4], d[5], r.tat_us, r.born_ms,
    lim[1], lim[2], lim[3], lim[4], tighter}
end

-- Checkouts older than this are of no use to any window (the adaptive
-- window's HORIZON_MS).
local HORIZON_MS = 30000
-- Batches one read returns at most (the reader asks again from the last).
local READ_MAX = 1000

-- FCALL sluice_7_adapt 3 <room> <checkouts> <leader> <id> <lease_ms> <after>
--       <batch>
-- Once a second from every gateway of an adaptive room: appends <batch>
-- (its checkouts since its last call, "" none; dated by the entry's id,
-- Redis's clock), takes the room's lease for gateway <id> for <lease_ms>
-- if nobody holds it or <id> already does (as
-- sluice_admission::fleet_rate::leads), and reads the batches after stream
-- id <after> ("-": the last HORIZON_MS).
-- -> {now_ms, leads 0/1, holder, ad_rate, ad_reason, ad_at_ms, ad_state,
--     ad_by, id1, batch1, id2, batch2, ...} (all strings)
local function adapt(keys, args)
  local id, lease_ms, after, batch = args[1], tonumber(args[2]), args[3], args[4]
  local ms = now_ms()
  local horizon = string.format('%d', math.max(0, ms - HORIZON_MS))
  if batch ~= '' then
    redis.call('XADD', keys[2], 'MINID', '~', horizon, '*', 'b', batch)
    redis.call('PEXPIRE', keys[2], 2 * HORIZON_MS)
  end
  local holder = redis.call('GET', keys[3])
  local leads = '0'
  if not holder or holder == id then
    redis.call('SET', keys[3], id, 'PX', lease_ms)
    holder, leads = id, '1'
  end
  local from = horizon
  if after ~= '-' then from = '(' .. after end
  local entries = redis.call('XRANGE', keys[2], from, '+', 'COUNT', READ_MAX)
  local d = stored_decision(keys[1])
  local out = {string.format('%d', ms), leads, holder, d[1], d[2], d[3], d[4], d[5]}
  for _, e in ipairs(entries) do
    local text = ''
    for i = 1, #e[2], 2 do
      if e[2][i] == 'b' then text = e[2][i + 1] end
    end
    table.insert(out, e[1])
    table.insert(out, text)
  end
  return out
end

-- FCALL sluice_7_decide 2 <room> <leader> <id> <rate> <reason> <at_ms>
--       <state> <previous_at_ms>
-- The leader's step: written only while <id> holds the lease and the
-- decision stored is still the one it stepped from (its ad_at_ms, "" for
-- none), so a leader that lost the lease, or stepped from an old
-- decision, writes nothing. -> 1 written | 0 not
local function decide(keys, args)
  if redis.call('GET', keys[2]) ~= args[1] then return 0 end
  local at = redis.call('HGET', keys[1], 'ad_at_ms') or ''
  if at ~= args[6] then return 0 end
  redis.call('HSET', keys[1], 'ad_rate', args[2], 'ad_reason', args[3], 'ad_at_ms', args[4],
    'ad_state', args[5], 'ad_by', args[1])
  return 1
end

-- FCALL sluice_7_claim 4 <room> <slots> <released> <spent> <seq> <pass_ttl_ms>
--       <max_active> <claim_window_ms>
-- The pass of a released place. The first claim takes a slot, if one is
-- free (of the smallest max_active the live gateways' configs give:
-- lim_max_active), and ends at now + pass_ttl; later claims get the same end. With no
-- slot free the place stays released (its claim window starts again: its
-- holder is here) and the holder asks again. While the room warms up, no
-- new slot is taken: the gateways are still counting the slots of the
-- passes out (reseed). A place released before Redis lost the room, of
-- which Redis has no record, is taken as released until lost_until_ms.
-- -> {0, serving} still waiting | {1, expires_at_ms} admitted | {2, 0} gone
--    | {3, 0} released, no slot free yet
local function claim(keys, args)
  local seq, ttl = args[1], tonumber(args[2])
  local max_active = limit_or(keys[1], 'lim_max_active', tonumber(args[3]))
  local claim_window_ms = tonumber(args[4])
  local v = redis.call('HMGET', keys[1], 'serving', 'born_ms', 'lost_below', 'lost_until_ms',
    'lost_from')
  local serving = num(v[1])
  if tonumber(seq) >= serving then
    return {0, serving}
  end
  local ms = now_ms()
  local held = tonumber(redis.call('ZSCORE', keys[2], 'c' .. seq))
  if held and held > ms then
    return {1, held}
  end
  local deadline = tonumber(redis.call('ZSCORE', keys[3], 'u' .. seq))
  if ms - num(v[2]) < WARM_UP_MS or reseed_hold(keys[1], num(v[2]), ms) then
    -- The holder is here: its claim window starts again, so a place Redis
    -- kept is not dropped as a no-show while the room warms up.
    if deadline and deadline > ms then
      redis.call('ZADD', keys[3], 'XX', math.max(deadline, ms + claim_window_ms), 'u' .. seq)
    end
    return {3, 0}
  end
  -- Only a place whose claim window was open at the loss: an older one
  -- (a no-show, a pass that ended or was given back) stays gone, and so
  -- does one a gateway re-seeded as spent (its pass given back, or its
  -- window over).
  local lost_from = tonumber(v[5])
  if not deadline and lost_from and tonumber(seq) >= lost_from
      and tonumber(seq) < num(v[3]) and ms < num(v[4])
      and redis.call('SISMEMBER', keys[4], seq) == 0 then
    deadline = num(v[4])
    redis.call('ZADD', keys[3], deadline, 'u' .. seq)
    -- Counted in the released set from now on, no longer as lost.
    if num(redis.call('HGET', keys[1], 'lost_pending')) > 0 then
      redis.call('HINCRBY', keys[1], 'lost_pending', -1)
    end
  end
  if not deadline or deadline <= ms then
    return {2, 0}
  end
  local passes = redis.call('ZCOUNT', keys[2], '(' .. string.format('%d', ms), '+inf')
  if passes >= max_active then
    redis.call('ZADD', keys[3], 'XX', ms + claim_window_ms, 'u' .. seq)
    return {3, 0}
  end
  redis.call('ZREM', keys[3], 'u' .. seq)
  redis.call('ZADD', keys[2], ms + ttl, 'c' .. seq)
  redis.call('HINCRBY', keys[1], 'shows', 1)
  return {1, ms + ttl}
end

-- FCALL sluice_7_reseed 4 <room> <slots> <released> <spent> <pending_seen>
--       <lost_from> <id> <last 0/1> <read_ms> <n> <seq1> <ends_ms1> ...
--       <seq_n> <ends_ms_n> <spent_seq1> <spent_seq2> ...
-- After Redis lost the room, a gateway counts again the slots of the n
-- passes it handed out that are still alive: each slot only ever ends
-- later (ZADD GT), and a place reseeded as a pass no longer waits to be
-- collected. The places it knows to be spent (passes given back, windows
-- over) are never taken back (the spent set, until lost_until_ms).
-- pending_seen (the uncollected places it last saw) and lost_from (the
-- `serving` it saw one claim window before) were read at store time
-- read_ms: only the freshest reads count (within FRESH_READ_MS of the
-- freshest pushed; a fresher one replaces older ones), the highest pending
-- and the lowest lost_from among them, so a gateway cut off for minutes
-- does not speak for the room. Gateway <id> counts in reseeded_n (see
-- reseed_hold) with its last call (<last> = 1), when all its passes are
-- in. -> the slots added or moved later
local FRESH_READ_MS = 2000
local function reseed(keys, args)
  local ms = now_ms()
  local pending_seen, lost_from, id = tonumber(args[1]), tonumber(args[2]), args[3]
  local last, read_ms, n = tonumber(args[4]), tonumber(args[5]), tonumber(args[6])
  local h = redis.call('HMGET', keys[1], 'born_ms', 'rs_born', 'rs:' .. id, 'lost_read_ms',
    'lost_until_ms')
  local this_loss = h[1] and h[1] == h[2]
  if this_loss and last == 1 and h[3] ~= h[1] then
    redis.call('HSET', keys[1], 'rs:' .. id, h[1])
    redis.call('HINCRBY', keys[1], 'reseeded_n', 1)
  end
  if this_loss then
    local known_read = num(h[4])
    local known = tonumber(redis.call('HGET', keys[1], 'lost_from'))
    -- (A lost_from beyond any seq, or a read staler than the freshest, is
    -- left out.)
    local from_ok = lost_from < 9007199254740992
    if known_read < 0 or read_ms > known_read + FRESH_READ_MS then
      redis.call('HSET', keys[1], 'lost_pending', string.format('%d', pending_seen),
        'lost_read_ms', string.format('%d', read_ms))
      if from_ok then
        redis.call('HSET', keys[1], 'lost_from', string.format('%d', lost_from))
      end
    elseif read_ms + FRESH_READ_MS >= known_read then
      if pending_seen > num(redis.call('HGET', keys[1], 'lost_pending')) then
        redis.call('HSET', keys[1], 'lost_pending', string.format('%d', pending_seen))
      end
      if from_ok and (not known or lost_from < known) then
        redis.call('HSET', keys[1], 'lost_from', string.format('%d', lost_from))
      end
      if read_ms > known_read then
        redis.call('HSET', keys[1], 'lost_read_ms', string.format('%d', read_ms))
      end
    end
  end
  local changed = 0
  for i = 7, 6 + 2 * n - 1, 2 do
    local ends = tonumber(args[i + 1])
    if ends and ends > ms then
      changed = changed + redis.call('ZADD', keys[2], 'GT', 'CH', ends, 'c' .. args[i])
      if redis.call('ZREM', keys[3], 'u' .. args[i]) == 1
          and num(redis.call('HGET', keys[1], 'lost_kept')) > 0 then
        redis.call('HINCRBY', keys[1], 'lost_kept', -1)
      end
    end
  end
  if #args > 6 + 2 * n then
    for i = 7 + 2 * n, #args do
      redis.call('SADD', keys[4], args[i])
    end
    local until_ms = num(h[5])
    if until_ms > ms then
      redis.call('PEXPIREAT', keys[4], string.format('%d', until_ms))
    else
      redis.call('PEXPIRE', keys[4], WARM_UP_MAX_MS)
    end
  end
  return changed
end

-- FCALL sluice_7_give_back 2 <room> <slots> <seq> <pass_ttl_ms>
-- A pass that can start no more checkouts frees its slot (and says how
-- long it held it). -> 1 if it held one
local function give_back(keys, args)
  local ends = tonumber(redis.call('ZSCORE', keys[2], 'c' .. args[1]))
  if not ends then return 0 end
  redis.call('ZREM', keys[2], 'c' .. args[1])
  local held_ms = tonumber(args[2]) - (ends - now_ms())
  observe_hold(keys[1], math.max(0, held_ms))
  return 1
end

-- FCALL sluice_7_set_state 1 <room> <paused 0/1> <sold_out 0/1> <only_if_new 0/1>
-- The kill switch and sold out, written when a gateway's config changes
-- them; with only_if_new (a gateway starting, or one that saw Redis lose
-- the room) nothing changes when the room already has a state.
-- -> the new version
local function set_state(keys, args)
  local paused, sold_out = tonumber(args[1]), tonumber(args[2])
  -- A room hash a tick made anew after a loss has a version (0) but no
  -- state anyone set: state_set (or a version above 0, from a gateway
  -- before sluice_5) says one was.
  if tonumber(args[3]) == 1 and (redis.call('HEXISTS', keys[1], 'state_set') == 1
      or num(redis.call('HGET', keys[1], 'version')) > 0) then
    return num(redis.call('HGET', keys[1], 'version'))
  end
  redis.call('HSET', keys[1], 'state_set', 1)
  local v = redis.call('HMGET', keys[1], 'paused', 'sold_out')
  if num(v[1]) ~= paused or num(v[2]) ~= sold_out then
    redis.call('HSET', keys[1], 'paused', paused, 'sold_out', sold_out)
    return redis.call('HINCRBY', keys[1], 'version', 1)
  end
  return num(redis.call('HGET', keys[1], 'version'))
end

-- A gateway not seen for this long is forgotten.
local FORGET_MS = 3600000

-- FCALL sluice_7_heartbeat 1 sluice:fleet <id> <region>
-- Marks gateway <id> seen now and lists the fleet.
-- -> {now_ms, id1, region1, seen_ms1, id2, ...} (all strings)
local function heartbeat(keys, args)
  local ms = now_ms()
  redis.call('HSET', keys[1], args[1], string.format('%d', ms) .. ' ' .. args[2])
  local all = redis.call('HGETALL', keys[1])
  local out = {string.format('%d', ms)}
  for i = 1, #all, 2 do
    local seen, region = string.match(all[i + 1], '^(%d+) (.*)$')
    seen = tonumber(seen)
    if seen == nil or ms - seen > FORGET_MS then
      redis.call('HDEL', keys[1], all[i])
    else
      table.insert(out, all[i])
      table.insert(out, region)
      table.insert(out, string.format('%d', seen))
    end
  end
  return out
end

--[[ ---------------------------------------------------------------------
One place per account (`[rooms.enqueue]`): its own keys and functions; the
line's keys above keep their meaning.

  sluice2:{R}:acct:<hash> STRING "<seq> <ticket id> <ticket exp ms> <pass exp
                             ms, 0: not collected>" of the account whose
                             keyed hash (32 hex digits, never the account
                             id) is <hash>; expires (PX) once no ticket or
                             pass of the place can still be live.

The rule (the same as the embedded room's, sluice_admission::room's
accounts): the account's place holds it while its ticket waits (seq not
yet released, ticket not expired), while it is released and not yet
collected (in :released), and once its pass was collected, until the
pass's expiry (a pass given back holds it too: the gateway records the
pass's end with enqueue_pass). After that the account joins again, at the
back.
----------------------------------------------------------------------- ]]

-- Whether the place of account record `rec` still holds the account.
-- -> live, seq, id, ticket exp ms
local function account_place(keys, rec, ms)
  local seq, id, texp, pexp = string.match(rec, '^(%d+) (%x+) (%d+) (%d+)$')
  if not seq then return false end
  seq, texp, pexp = tonumber(seq), tonumber(texp), tonumber(pexp)
  if pexp > 0 then return ms < pexp, seq, id, texp end
  local serving = num(redis.call('HGET', keys[1], 'serving'))
  if seq >= serving then return ms < texp, seq, id, texp end
  local held = tonumber(redis.call('ZSCORE', keys[2], 'c' .. seq))
  if held and held > ms then return true, seq, id, texp end
  local due = tonumber(redis.call('ZSCORE', keys[3], 'u' .. seq))
  return (due ~= nil and due > ms), seq, id, texp
end

-- FCALL sluice_7_enqueue 4|5 <room> <slots> <released> <account> [<client>]
--       <capacity> <hw_next> <period_us> <burst> <ticket id> <ticket_ttl_ms>
--       <keep_ms>
-- A join with an account: its live place if it holds one, else one new
-- place by join's own rules (the client's limit when a client key is given,
-- capacity, pause, sold out, warm-up), kept as the account's with ticket
-- <ticket id> for <keep_ms> (the longest a ticket and then its pass can
-- live).
-- -> {1, seq, ticket id, ticket exp ms} held
--  | {0, first, granted, serving, paused, sold_out, warming, retry_after_ms}
local function enqueue(keys, args)
  local ms = now_ms()
  local rec = redis.call('GET', keys[4])
  if rec then
    local live, seq, id, texp = account_place(keys, rec, ms)
    if live then
      return {1, seq, id, string.format('%d', texp)}
    end
  end
  local join_keys, join_args = {keys[1]}, {1, args[1], args[2], args[3], args[4]}
  if keys[5] then
    join_keys[2] = keys[5]
    join_args[6] = 1
  end
  local out = join(join_keys, join_args)
  if out[2] == 1 then
    local texp = ms + tonumber(args[6])
    redis.call('SET', keys[4], string.format('%d %s %d 0', out[1], args[5], texp),
      'PX', tonumber(args[7]))
  end
  return {0, out[1], out[2], out[3], out[4], out[5], out[6], out[7]}
end

-- FCALL sluice_7_enqueue_pass 1 <account> <seq> <pass exp ms>
-- The pass of the account's place <seq> was collected: it holds the account
-- until its expiry, given back or not. -> 1 if recorded
local function enqueue_pass(keys, args)
  local rec = redis.call('GET', keys[1])
  if not rec then return 0 end
  local seq, id, texp = string.match(rec, '^(%d+) (%x+) (%d+) %d+$')
  if seq ~= args[1] then return 0 end
  local pexp = tonumber(args[2])
  redis.call('SET', keys[1], string.format('%s %s %s %d', seq, id, texp, pexp),
    'PXAT', math.max(pexp, now_ms() + 1))
  return 1
end

--[[ Passes that end, fleet-wide (`pass_idle_s`, `Sluice-Pass: end`): the
same rule as sluice_admission::pass_idle for both back ends.

Keys of room R (same hash tag):
  sluice2:{R}:active  ZSET   collected passes' last activity, only while the
                             room has pass_idle_s: "c<seq>", score = unix ms of
                             the last request with the pass (or checkout
                             running) that any gateway saw, pushed with its
                             next sluice_7_passes call (every tick). At most
                             the passes holding a slot, plus those ended
                             within one idle window.
  sluice2:{R}:ended   STREAM passes ended before their time (idle, or by the
                             origin), one entry each: s = seq, e = the pass's
                             end (unix ms). Every gateway reads it from where
                             it last read and refuses those passes until
                             their end. Trimmed to the last pass_ttl (an older
                             entry's pass has expired), so it holds at most
                             the passes ended within one pass's life.
]]

-- Appends pass `seq` (ending at `ends_ms`) to the ended stream, trimming
-- entries older than one pass life.
local function note_ended(ended_key, seq, ends_ms, ms, ttl)
  if ends_ms <= ms then return end
  local horizon = string.format('%d', math.max(0, ms - ttl))
  redis.call('XADD', ended_key, 'MINID', '~', horizon, '*', 's', seq, 'e',
    string.format('%d', ends_ms))
  redis.call('PEXPIRE', ended_key, ttl + 1000)
end

-- FCALL sluice_7_pass_end 4 <room> <slots> <active> <ended> <seq> <ends_ms>
--       <pass_ttl_ms>
-- Ends pass `seq` before its time (the origin said so): its slot goes back
-- at once and every gateway refuses it until <ends_ms>. -> 1 if it held a
-- slot
local function pass_end(keys, args)
  local seq, ends_ms, ttl = args[1], tonumber(args[2]), tonumber(args[3])
  local ms = now_ms()
  local freed = 0
  local slot = tonumber(redis.call('ZSCORE', keys[2], 'c' .. seq))
  if slot then
    redis.call('ZREM', keys[2], 'c' .. seq)
    observe_hold(keys[1], math.max(0, ttl - (slot - ms)))
    freed = 1
  end
  redis.call('ZREM', keys[3], 'c' .. seq)
  note_ended(keys[4], seq, ends_ms, ms, ttl)
  return freed
end

-- Idle passes ended by one call, at most (the next tick takes the rest).
local IDLE_SWEEP_MAX = 256
-- Ended passes one call reads, at most (the next reads on from the last).
local ENDED_READ_MAX = 1000

-- FCALL sluice_7_passes 4 <room> <slots> <active> <ended> <idle_ms>
--       <pass_ttl_ms> <after> <n> <seq_1> .. <seq_n>
-- Every tick of every gateway: the passes used on this gateway since its
-- last call (a request carried them, or a checkout of theirs runs) are
-- active now; with idle_ms > 0 (pass_idle_s), a pass holding a slot and
-- not active for idle_ms (sluice_admission::pass_idle::is_idle: now - last
-- >= idle) gives its slot back and is ended; then the ended passes after
-- stream id <after> ("-": all) are read.
-- -> {now_ms, n_idle, idle seq_1 .. idle seq_n_idle,
--     id_1, seq_1, ends_ms_1, id_2, ...} (all strings)
local function passes(keys, args)
  local idle_ms, ttl, after, n = tonumber(args[1]), tonumber(args[2]), args[3], tonumber(args[4])
  local ms = now_ms()
  local idle = {}
  if idle_ms > 0 then
    for i = 5, 4 + n do
      local member = 'c' .. args[i]
      local slot = tonumber(redis.call('ZSCORE', keys[2], member))
      if slot and slot > ms then
        redis.call('ZADD', keys[3], 'GT', ms, member)
      end
    end
    local due = redis.call('ZRANGEBYSCORE', keys[3], '-inf', string.format('%d', ms - idle_ms),
      'LIMIT', 0, IDLE_SWEEP_MAX)
    for _, member in ipairs(due) do
      redis.call('ZREM', keys[3], member)
      local slot = tonumber(redis.call('ZSCORE', keys[2], member))
      if slot and slot > ms then
        redis.call('ZREM', keys[2], member)
        observe_hold(keys[1], math.max(0, ttl - (slot - ms)))
        local seq = string.sub(member, 2)
        note_ended(keys[4], seq, slot, ms, ttl)
        idle[#idle + 1] = seq
      end
    end
  end
  local out = {string.format('%d', ms), tostring(#idle)}
  for _, seq in ipairs(idle) do out[#out + 1] = seq end
  local from = '-'
  if after ~= '-' then from = '(' .. after end
  local entries = redis.call('XRANGE', keys[4], from, '+', 'COUNT', ENDED_READ_MAX)
  for _, e in ipairs(entries) do
    local seq, ends = '', '0'
    for i = 1, #e[2], 2 do
      if e[2][i] == 's' then seq = e[2][i + 1] end
      if e[2][i] == 'e' then ends = e[2][i + 1] end
    end
    out[#out + 1] = e[1]
    out[#out + 1] = seq
    out[#out + 1] = ends
  end
  return out
end
-- (end of the passes-that-end section)

redis.register_function('sluice_7_heartbeat', heartbeat)
redis.register_function('sluice_7_join', join)
redis.register_function('sluice_7_tick', tick)
redis.register_function('sluice_7_claim', claim)
redis.register_function('sluice_7_reseed', reseed)
redis.register_function('sluice_7_give_back', give_back)
redis.register_function('sluice_7_set_state', set_state)
redis.register_function('sluice_7_adapt', adapt)
redis.register_function('sluice_7_decide', decide)
redis.register_function('sluice_7_enqueue', enqueue)
redis.register_function('sluice_7_enqueue_pass', enqueue_pass)

redis.register_function('sluice_7_pass_end', pass_end)
redis.register_function('sluice_7_draw', draw)
redis.register_function('sluice_7_passes', passes)
