#!lua name=sluice_1
--[[
Sluice's waiting rooms on Redis: every change to a room goes through one of
these Functions, so each is atomic, and each reads Redis's own clock (TIME).

The library and every function carry a version (`sluice_1`): a change of a
function's arguments or of the keys' layout makes a new version, so during a
rolling upgrade the old gateways keep calling their own library (FUNCTION
LOAD REPLACE of one version never removes another's functions). Both
versions then share the room's keys, so a layout change also needs its own
key prefix.

Keys of room R, under one hash tag so Redis Cluster keeps a room on one slot:
  sluice:{R}        HASH  next (next seq to give), serving (seqs below it are
                          released), tat_us (GCRA theoretical arrival time),
                          paused, sold_out (0/1), version (bumped by set_state),
                          born_ms (when this hash was made: see WARM_UP_MS)
  sluice:{R}:slots  ZSET  the max_active slots: "u<seq>" a released place not
                          collected yet, "c<seq>" a collected pass; score =
                          unix ms at which the slot is free again

And one key for the fleet itself (its own slot in Redis Cluster):
  sluice:fleet      HASH  gateway id -> "<unix ms last seen> <region>"

Nothing is kept per waiting shopper: a place is its seq, and the ticket
(signed by the gateway) carries it.
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

local function num(v)
  return tonumber(v) or 0
end

-- The room's numbers, with the high-water marks a gateway pushes: a Redis
-- restarted empty never gives a seq twice nor un-releases a place.
local function load(key, hw_next, hw_serving, ms)
  local v = redis.call('HMGET', key, 'next', 'serving', 'tat_us', 'paused', 'sold_out', 'version',
    'born_ms')
  local r = {
    next = num(v[1]), serving = num(v[2]), tat_us = num(v[3]),
    paused = num(v[4]), sold_out = num(v[5]), version = num(v[6]), born_ms = tonumber(v[7]) or ms,
  }
  -- A gateway that saw more than Redis holds means Redis lost writes (a
  -- restart without them, a failover to a replica behind): warm up again,
  -- so every gateway's numbers land before a place is given or released.
  if hw_next > r.next or hw_serving > r.serving then r.born_ms = ms end
  if hw_next > r.next then r.next = hw_next end
  if hw_serving > r.serving then r.serving = hw_serving end
  if r.serving > r.next then r.next = r.serving end
  return r
end

-- FCALL sluice_1_join 1 <room> <n> <capacity> <hw_next>
-- Gives up to n consecutive seqs (fewer when the line would pass capacity).
-- -> {first, granted, serving, paused, sold_out, warming}
local function join(keys, args)
  local n, capacity, hw_next = tonumber(args[1]), tonumber(args[2]), tonumber(args[3])
  local ms = now_ms()
  local r = load(keys[1], hw_next, 0, ms)
  local granted = 0
  local warming = 0
  if ms - r.born_ms < WARM_UP_MS then
    warming = 1
  elseif r.paused == 0 and r.sold_out == 0 then
    local room_left = capacity - (r.next - r.serving)
    granted = math.max(0, math.min(n, room_left))
  end
  local first = r.next
  redis.call('HSET', keys[1], 'next', r.next + granted, 'serving', r.serving, 'born_ms', r.born_ms)
  return {first, granted, r.serving, r.paused, r.sold_out, warming}
end

-- FCALL sluice_1_tick 2 <room> <slots> <rate> <burst> <max_active>
--       <claim_window_ms> <hw_next> <hw_serving> <sold_out_seen>
-- Frees ended slots, then releases the next places while the GCRA
-- (rate, burst) and the free slots allow; any gateway may call it, as often
-- as it likes: the rate comes from TIME, not from the number of calls.
-- -> {next, serving, held, paused, sold_out, version, released, now_ms}
local function tick(keys, args)
  local rate, burst, max_active = tonumber(args[1]), tonumber(args[2]), tonumber(args[3])
  local claim_window_ms = tonumber(args[4])
  local us = now_us()
  local ms = math.floor(us / 1000)
  local r = load(keys[1], tonumber(args[5]), tonumber(args[6]), ms)
  if tonumber(args[7]) == 1 and r.sold_out == 0 then
    r.sold_out = 1
    r.version = r.version + 1
  end
  redis.call('ZREMRANGEBYSCORE', keys[2], '-inf', ms)
  local held = redis.call('ZCARD', keys[2])
  local released = 0
  local warming = ms - r.born_ms < WARM_UP_MS
  if not warming and r.paused == 0 and r.sold_out == 0 and r.next > r.serving
      and held < max_active then
    local interval_us = math.floor(1000000 / rate)
    local tat = math.max(r.tat_us, us)
    local allowed = math.floor((us + burst * interval_us - tat) / interval_us)
    released = math.min(allowed, max_active - held, r.next - r.serving)
    if released > 0 then
      for i = 0, released - 1 do
        redis.call('ZADD', keys[2], ms + claim_window_ms, 'u' .. string.format('%d', r.serving + i))
      end
      r.serving = r.serving + released
      r.tat_us = tat + released * interval_us
      held = held + released
    else
      released = 0
    end
  end
  redis.call('HSET', keys[1], 'next', r.next, 'serving', r.serving, 'tat_us', r.tat_us,
    'paused', r.paused, 'sold_out', r.sold_out, 'version', r.version, 'born_ms', r.born_ms)
  return {r.next, r.serving, held, r.paused, r.sold_out, r.version, released, ms}
end

-- FCALL sluice_1_claim 2 <room> <slots> <seq> <pass_ttl_ms>
-- The pass of a released place: the first claim turns the place's slot into
-- a pass slot ending at now + pass_ttl; later claims get the same end.
-- -> {0, serving} still waiting | {1, expires_at_ms} admitted | {2, 0} gone
local function claim(keys, args)
  local seq, ttl = args[1], tonumber(args[2])
  local serving = num(redis.call('HGET', keys[1], 'serving'))
  if tonumber(seq) >= serving then
    return {0, serving}
  end
  local ms = now_ms()
  redis.call('ZREMRANGEBYSCORE', keys[2], '-inf', ms)
  local held = redis.call('ZSCORE', keys[2], 'c' .. seq)
  if held then
    return {1, tonumber(held)}
  end
  if redis.call('ZREM', keys[2], 'u' .. seq) == 1 then
    redis.call('ZADD', keys[2], ms + ttl, 'c' .. seq)
    return {1, ms + ttl}
  end
  return {2, 0}
end

-- FCALL sluice_1_give_back 2 <room> <slots> <seq>
-- A pass that can start no more checkouts frees its slot. -> 1 if it held one
local function give_back(keys, args)
  return redis.call('ZREM', keys[2], 'c' .. args[1])
end

-- FCALL sluice_1_set_state 1 <room> <paused 0/1> <sold_out 0/1> <only_if_new 0/1>
-- The kill switch and sold out, written when a gateway's config changes
-- them; with only_if_new (a gateway starting, or one that saw Redis lose
-- the room) nothing changes when the room already has a state.
-- -> the new version
local function set_state(keys, args)
  local paused, sold_out = tonumber(args[1]), tonumber(args[2])
  if tonumber(args[3]) == 1 and redis.call('HEXISTS', keys[1], 'version') == 1 then
    return num(redis.call('HGET', keys[1], 'version'))
  end
  local v = redis.call('HMGET', keys[1], 'paused', 'sold_out')
  if num(v[1]) ~= paused or num(v[2]) ~= sold_out then
    redis.call('HSET', keys[1], 'paused', paused, 'sold_out', sold_out)
    return redis.call('HINCRBY', keys[1], 'version', 1)
  end
  return num(redis.call('HGET', keys[1], 'version'))
end

-- A gateway not seen for this long is forgotten.
local FORGET_MS = 3600000

-- FCALL sluice_1_heartbeat 1 sluice:fleet <id> <region>
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

redis.register_function('sluice_1_heartbeat', heartbeat)
redis.register_function('sluice_1_join', join)
redis.register_function('sluice_1_tick', tick)
redis.register_function('sluice_1_claim', claim)
redis.register_function('sluice_1_give_back', give_back)
redis.register_function('sluice_1_set_state', set_state)
