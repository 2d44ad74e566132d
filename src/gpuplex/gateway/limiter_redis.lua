-- gpuplex rate limiter: one atomic decision (admit or settle) over every limit of one request.
-- The same rules as gpuplex.core.serve.limits (admit, settle, SlidingWindow, Leases); the tests
-- check that the two agree. The time is Redis TIME: one clock for every gateway process.
--
-- A template: `lua_source()` in limiter_redis.py fills in the two placeholders below with the names
-- of limit kinds (core.serve.limits.LimitKind) before Redis sees the script, so the names it compares
-- kinds with are always the names the gateway sends.
--
-- KEYS, in the order of the limits (ARGV below):
--   window limit (requests or tokens per minute): 3 keys
--     <zset>  ZSET   member request_id, score admitted-at (s)
--     <amt>   HASH   request_id -> what it takes (1 request, or its tokens)
--     <sum>   STRING the total of <amt>
--   concurrency limit (requests in flight): 1 key
--     <zset>  ZSET   member request_id, score lease end (s)
-- ARGV: op ("admit" | "settle"), request_id, tokens (reserved at admit, actual at settle),
--       lease_s, window_s, concurrency_retry_s, window_ttl_s, then kind, amount per limit.
-- Reply: {1} admitted (or settled); {0, limit index (0-based), retry_after_s, never (0|1)}.
--
-- Request ids are unique per request. A call repeated with the same id (a client retry after a
-- lost reply) decides as if its first run had not happened and replaces that run's entries, so a
-- retry can neither count a request twice nor be refused by its own first run.

local op = ARGV[1]
local request_id = ARGV[2]
local tokens = tonumber(ARGV[3])
local lease_s = tonumber(ARGV[4])
local window_s = tonumber(ARGV[5])
local concurrency_retry_s = tonumber(ARGV[6])
local window_ttl_s = tonumber(ARGV[7])
local FIRST_LIMIT_ARG = 8
-- Bounds how many values one call passes to Lua's unpack (its C stack holds about 8000).
local PAGE = 500

local CONCURRENT = '$CONCURRENT'
local TOKENS = '$TOKENS'

-- Scores and times as exact decimal strings (tostring keeps only 14 digits: 10 us at today's epoch).
local function real(x)
  return string.format('%.17g', x)
end

local function int(x)
  return string.format('%d', x)
end

local limits = {}
local key_index = 1
for arg = FIRST_LIMIT_ARG, #ARGV, 2 do
  local limit = { kind = ARGV[arg], amount = tonumber(ARGV[arg + 1]), zset = KEYS[key_index] }
  if limit.kind == CONCURRENT then
    key_index = key_index + 1
  else
    limit.amt = KEYS[key_index + 1]
    limit.sum = KEYS[key_index + 2]
    key_index = key_index + 3
  end
  limits[#limits + 1] = limit
end

if op == 'settle' then
  for _, limit in ipairs(limits) do
    if limit.kind == CONCURRENT then
      redis.call('ZREM', limit.zset, request_id)
    elseif limit.kind == TOKENS then
      local old = redis.call('HGET', limit.amt, request_id)
      if old then
        redis.call('HSET', limit.amt, request_id, int(tokens))
        redis.call('INCRBY', limit.sum, int(tokens - tonumber(old)))
      end
    end
  end
  return { 1 }
end

local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000

local function cost(limit)
  if limit.kind == TOKENS then
    return tokens
  end
  return 1
end

-- SlidingWindow.expire: drop entries admitted at or before now - window_s.
local function expire_window(limit)
  local horizon = real(now - window_s)
  local freed = 0
  while true do
    local old = redis.call('ZRANGEBYSCORE', limit.zset, '-inf', horizon, 'LIMIT', 0, PAGE)
    if #old == 0 then
      break
    end
    local amounts = redis.call('HMGET', limit.amt, unpack(old))
    for i = 1, #old do
      freed = freed + tonumber(amounts[i] or 0)
    end
    redis.call('HDEL', limit.amt, unpack(old))
    redis.call('ZREM', limit.zset, unpack(old))
  end
  if freed > 0 then
    redis.call('DECRBY', limit.sum, int(freed))
  end
end

-- SlidingWindow.wait_for_room_s: walk the oldest entries until enough room would free.
-- (limit.old: this request id's own entry, if it has one; it is not counted.)
local function wait_for_room_s(limit, need)
  local total = tonumber(redis.call('GET', limit.sum) or 0) - (limit.old or 0)
  local excess = total + need - limit.amount
  if excess <= 0 then
    return 0
  end
  local start = 0
  while true do
    local page = redis.call('ZRANGE', limit.zset, start, start + PAGE - 1, 'WITHSCORES')
    if #page == 0 then
      return window_s
    end
    local members = {}
    for i = 1, #page, 2 do
      members[#members + 1] = page[i]
    end
    local amounts = redis.call('HMGET', limit.amt, unpack(members))
    for i = 1, #members do
      if members[i] ~= request_id then
        excess = excess - tonumber(amounts[i] or 0)
      end
      if excess <= 0 then
        return math.max(0, tonumber(page[2 * i]) + window_s - now)
      end
    end
    start = start + PAGE
  end
end

-- limits._check: nil when the limit has room, else retry_after_s and never (0|1).
local function check(limit)
  if limit.kind == CONCURRENT then
    redis.call('ZREMRANGEBYSCORE', limit.zset, '-inf', real(now))
    local held = redis.call('ZCARD', limit.zset)
    if redis.call('ZSCORE', limit.zset, request_id) then
      held = held - 1
    end
    if held + 1 > limit.amount then
      return concurrency_retry_s, 0
    end
    return nil
  end
  local need = cost(limit)
  if need > limit.amount then
    return math.huge, 1
  end
  expire_window(limit)
  local old = redis.call('HGET', limit.amt, request_id)
  limit.old = old and tonumber(old) or nil
  local wait_s = wait_for_room_s(limit, need)
  if wait_s > 0 then
    return wait_s, 0
  end
  return nil
end

local worst, worst_wait_s, worst_never = nil, 0, 0
for index, limit in ipairs(limits) do
  local wait_s, never = check(limit)
  if wait_s ~= nil and (
        worst == nil
        or never > worst_never
        or (never == worst_never and wait_s > worst_wait_s)
      ) then
    worst, worst_wait_s, worst_never = index, wait_s, never
  end
end
if worst ~= nil then
  return { 0, worst - 1, real(worst_wait_s), worst_never }
end

for _, limit in ipairs(limits) do
  if limit.kind == CONCURRENT then
    redis.call('ZADD', limit.zset, real(now + lease_s), request_id)
    -- The set lives as long as its longest lease, and not a millisecond longer: its TTL is never
    -- more than the lease (rounded down to the millisecond).
    local last = redis.call('ZRANGE', limit.zset, -1, -1, 'WITHSCORES')
    redis.call('PEXPIREAT', limit.zset, int(math.floor(tonumber(last[2]) * 1000)))
  else
    local amount = cost(limit)
    -- A request id admitted again replaces its entry (the total stays the sum of the entries).
    if limit.old then
      redis.call('DECRBY', limit.sum, int(limit.old))
    end
    redis.call('ZADD', limit.zset, real(now), request_id)
    redis.call('HSET', limit.amt, request_id, int(amount))
    redis.call('INCRBY', limit.sum, int(amount))
    -- The newest entry is `now`: nothing here matters after now + window_s.
    redis.call('EXPIRE', limit.zset, window_ttl_s)
    redis.call('EXPIRE', limit.amt, window_ttl_s)
    redis.call('EXPIRE', limit.sum, window_ttl_s)
  end
end
return { 1 }
