-- moonflow.limit (mf.limit) — rate and concurrency limits modeled on
-- lua-resty-limit-traffic: mf.limit.req (a leaky bucket: rate a second,
-- burst held back and delayed), mf.limit.conn (requests in flight, given
-- back when the request ends) and mf.limit.count (requests a fixed
-- window), keyed by any string.
--
-- Local limits live in a shared dict: req is one call of the dict's leaky
-- bucket (read, updated and written under a stripe's lock), conn and
-- count one incr; exact across a server's workers. Cluster-wide limits
-- live in Redis: one EVALSHA a check (the script's SHA-1 is computed here,
-- EVAL runs it, and loads it, after a NOSCRIPT), on Redis's clock (TIME
-- inside the script): every process that shares the limit then measures
-- with one clock, whatever their own clocks say. When Redis fails the
-- limit does what on_redis_error says: "local" (the dict's limit, per
-- server), "allow" or "deny"; it leaves Redis alone for a second then.
local cshared = require "moonflow.shared"
local serve = require "moonflow.serve"

local type, tostring, tonumber, setmetatable, error, floor, ceil, max =
    type, tostring, tonumber, setmetatable, error, math.floor, math.ceil, math.max
local leaky = cshared.leaky

local M = {}

local mf -- moonflow itself, loaded at first use (it loads this module)
local function moonflow()
    mf = mf or require "moonflow"
    return mf
end

local LEAKY_CHECK, LEAKY_COMMIT, LEAKY_UNCOMMIT = 0, 1, 2
local REDIS_PAUSE_MS = 1000 -- how long a failed Redis is left alone

-- ---- arguments -----------------------------------------------------------

local function argerror(fname, msg) error(fname .. ": " .. msg, 3) end

local function number_opt(fname, opts, name, min, default)
    local v = opts[name]
    if v == nil and default ~= nil then return default end
    if type(v) ~= "number" or v ~= v or v < min or v == math.huge then
        argerror(fname, name .. ": a number >= " .. min .. " expected, got "
            .. (type(v) == "number" and tostring(v) or type(v)))
    end
    return v
end

local function dict_opt(fname, opts, needed)
    local d = opts.dict
    if d == nil and not needed then return nil end
    if type(d) == "string" then
        local found = cshared.get(d)
        if not found then argerror(fname, "dict: no shared dict '" .. d .. "'") end
        return found
    end
    if type(d) ~= "userdata" or tostring(getmetatable(d)) ~= "shared dict" then
        argerror(fname, "dict: a shared dict or its name expected, got " .. type(d))
    end
    return d
end

local ON_REDIS_ERROR = { ["local"] = true, allow = true, deny = true }

-- The Redis side of opts: the client, what to do when it fails.
local function redis_opt(fname, opts, lim)
    local r = opts.redis
    if r == nil then return end
    if type(r) == "string" then
        r = moonflow().redis(r)
    elseif tostring(getmetatable(r)) ~= "moonflow.redis" then
        argerror(fname, "redis: a redis:// URL or an mf.redis client expected, got " .. type(r))
    end
    lim.redis = r
    lim.kind = fname:match("^(mf%.limit%.%a+)")
    local on = opts.on_redis_error
    if on == nil then on = lim.dict and "local" or "allow" end
    if not ON_REDIS_ERROR[on] then
        argerror(fname, 'on_redis_error: "local", "allow" or "deny" expected, got ' .. tostring(on))
    end
    if on == "local" and not lim.dict then
        argerror(fname, 'on_redis_error = "local" needs dict (the local limit)')
    end
    lim.on_redis_error = on
    lim.prefix = opts.prefix or "mf:limit:"
end

local function key_arg(fname, key)
    local t = type(key)
    if t == "number" then return tostring(key) end
    if t ~= "string" or key == "" then
        argerror(fname, "key: a non-empty string expected, got "
            .. (t == "string" and "an empty string" or t))
    end
    return key
end

local function status_opt(fname, opts)
    local s = opts.status
    if s == nil then return 503 end
    if type(s) ~= "number" or s < 400 or s > 599 or floor(s) ~= s then
        argerror(fname, "status: an HTTP status from 400 to 599 expected, got " .. tostring(s))
    end
    return s
end

-- ---- Redis ---------------------------------------------------------------

-- One script a limit kind; each answers a string: the number, or
-- "rejected". Redis's clock (TIME) is the cluster's one clock, read to the
-- millisecond as the dict's (and nginx's): with burst 0 a finer clock lets
-- each request through a little after its due time, and the rate drifts
-- below itself by that much.
local SCRIPTS = {
    req = [[
if redis.replicate_commands then redis.replicate_commands() end
local rate, burst, mode = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local s = redis.call('HMGET', KEYS[1], 'e', 't')
local excess, last = tonumber(s[1]), tonumber(s[2])
if mode == 2 then
  if not excess then return '0' end
  excess = math.max(excess - 1, 0)
  redis.call('HSET', KEYS[1], 'e', tostring(excess))
  return tostring(excess)
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local left = 0
if excess then
  local elapsed = math.max(now - last, 0)
  left = math.max(excess - rate * elapsed / 1000 + 1, 0)
end
if left > burst then return 'rejected' end
if mode == 1 then
  redis.call('HSET', KEYS[1], 'e', tostring(left), 't', tostring(now))
  redis.call('PEXPIRE', KEYS[1], math.ceil((left + 1) * 1000 / rate))
end
return tostring(left)
]],
    conn = [[
local most, mode = tonumber(ARGV[1]), tonumber(ARGV[2])
local n = tonumber(redis.call('GET', KEYS[1]) or '0') + 1
if n > most then return 'rejected' end
if mode == 1 then redis.call('INCR', KEYS[1]) end
return tostring(n)
]],
    count = [[
local limit, window, mode = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
if mode == 2 then
  if redis.call('EXISTS', KEYS[1]) == 0 then return tostring(limit) end
  return tostring(limit - redis.call('DECR', KEYS[1]))
end
local used = tonumber(redis.call('GET', KEYS[1]) or '0') + 1
if used > limit then return 'rejected' end
if mode == 1 then
  redis.call('INCR', KEYS[1])
  if redis.call('PTTL', KEYS[1]) < 0 then redis.call('PEXPIRE', KEYS[1], window) end
end
return tostring(limit - used)
]],
}

local SHAS = {}
local function sha_of(kind)
    local sha = SHAS[kind]
    if not sha then
        local m = moonflow()
        sha = m.hex.encode(m.crypto.sha1(SCRIPTS[kind]))
        SHAS[kind] = sha
    end
    return sha
end

-- Runs the kind's script: its string answer, or nil, err.
local function redis_eval(lim, kind, key, ...)
    local r = lim.redis
    local res, err = r:call("EVALSHA", sha_of(kind), 1, lim.prefix .. key, ...)
    if res == nil and type(err) == "string" and err:find("^NOSCRIPT") then
        res, err = r:call("EVAL", SCRIPTS[kind], 1, lim.prefix .. key, ...)
    end
    if type(res) ~= "string" then
        return nil, err or "unexpected reply " .. tostring(res)
    end
    return res
end

-- Whether Redis is to be asked now (not within a pause after a failure).
local function redis_up(lim)
    return lim.redis and (moonflow().now() >= (lim.redis_paused_until or 0))
end

-- What a failed Redis check answers, as on_redis_error says: nil when the
-- local limit is to answer.
local function redis_failed(lim, fname, err)
    lim.redis_paused_until = moonflow().now() + REDIS_PAUSE_MS
    moonflow().log("warn", lim.kind .. ": redis: " .. tostring(err) .. " (on_redis_error = "
        .. lim.on_redis_error .. " for " .. REDIS_PAUSE_MS .. " ms)")
    if lim.on_redis_error == "allow" then return 0 end
    if lim.on_redis_error == "deny" then return false end
    return nil
end

-- The answer of a script ("rejected" or a number) as incoming's.
local function redis_answer(res)
    if res == "rejected" then return nil, "rejected" end
    return tonumber(res)
end

-- ---- the convenience, shared by the three --------------------------------

local REASONS = {
    [429] = "429 Too Many Requests\n",
    [503] = "503 Service Unavailable\n",
}

-- allow(key, resp): takes the request in (waiting out its delay) and
-- answers true; or answers resp with the limit's status and false.
local function allow(self, key, resp)
    local delay, err = self:incoming(key, true)
    if not delay then
        if resp then
            resp.status = self.status
            resp:send(REASONS[self.status] or "")
        end
        return false, err
    end
    -- under a millisecond a wait costs more than it spaces (a timer, a
    -- resume): OpenResty's rule
    if delay >= 0.001 then moonflow().sleep(delay * 1000) end
    return true
end

-- ---- mf.limit.req --------------------------------------------------------

local Req = {}
Req.__index = Req

-- A local bucket on the dict's clock takes one C call here (the common
-- case, and a route's limit: each Lua call of an uncompiled handler costs).
function Req:allow(key, resp)
    if self.redis or self.clock then return allow(self, key, resp) end
    if type(key) ~= "string" then key = key_arg("lim:allow(key [, resp])", key) end
    local excess = leaky(self.dict, key, self.rate, self.burst, LEAKY_COMMIT)
    if excess then
        if excess >= self.rate * 0.001 then moonflow().sleep(excess / self.rate * 1000) end
        return true
    end
    if resp then
        resp.status = self.status
        resp:send(REASONS[self.status] or "")
    end
    return false, "rejected"
end

function M.req(opts)
    local fname = "mf.limit.req(opts)"
    if type(opts) ~= "table" then argerror(fname, "a table expected, got " .. type(opts)) end
    local lim = setmetatable({
        rate = number_opt(fname, opts, "rate", 0),
        burst = number_opt(fname, opts, "burst", 0, 0),
        status = status_opt(fname, opts),
        clock = opts.clock,
    }, Req)
    if lim.rate <= 0 then argerror(fname, "rate: a number > 0 expected, got " .. lim.rate) end
    if lim.clock ~= nil and type(lim.clock) ~= "function" then
        argerror(fname, "clock: a function giving ms expected, got " .. type(lim.clock))
    end
    lim.dict = dict_opt(fname, opts, opts.redis == nil)
    redis_opt(fname, opts, lim)
    return lim
end

local function req_local(self, key, mode)
    local excess, err = leaky(self.dict, key, self.rate, self.burst, mode,
        self.clock and self.clock() or nil)
    if not excess then return nil, err end
    return excess / self.rate, excess
end

local function req_redis(self, fname, key, mode)
    local res, err = redis_eval(self, "req", key, self.rate, self.burst, mode)
    if res then
        local excess, rejected = redis_answer(res)
        if not excess then return nil, rejected end
        return excess / self.rate, excess
    end
    local v = redis_failed(self, fname, err)
    if v == 0 then return 0, 0 end
    if v == false then return nil, "rejected" end
    return req_local(self, key, mode)
end

-- lim:incoming(key, commit): delay (seconds to wait), excess; or nil,
-- "rejected". commit true counts the request (else only looks).
function Req:incoming(key, commit)
    local fname = "lim:incoming(key, commit)"
    key = key_arg(fname, key)
    local mode = commit and LEAKY_COMMIT or LEAKY_CHECK
    if redis_up(self) then return req_redis(self, fname, key, mode) end
    if not self.dict then -- Redis paused, no local limit
        if self.on_redis_error == "deny" then return nil, "rejected" end
        return 0, 0
    end
    return req_local(self, key, mode)
end

-- lim:uncommit(key): takes back one committed request; the excess left.
function Req:uncommit(key)
    local fname = "lim:uncommit(key)"
    key = key_arg(fname, key)
    if redis_up(self) then
        local res = redis_eval(self, "req", key, self.rate, self.burst, LEAKY_UNCOMMIT)
        if res then return tonumber(res) end
    end
    if not self.dict then return 0 end
    return leaky(self.dict, key, self.rate, self.burst, LEAKY_UNCOMMIT,
        self.clock and self.clock() or nil)
end

-- ---- mf.limit.count ------------------------------------------------------

local Count = {}
Count.__index = Count
Count.allow = allow

function M.count(opts)
    local fname = "mf.limit.count(opts)"
    if type(opts) ~= "table" then argerror(fname, "a table expected, got " .. type(opts)) end
    local lim = setmetatable({
        limit = number_opt(fname, opts, "limit", 0),
        window = number_opt(fname, opts, "window", 0),
        status = status_opt(fname, opts),
    }, Count)
    if lim.window <= 0 then argerror(fname, "window: a number of seconds > 0 expected, got " .. lim.window) end
    lim.dict = dict_opt(fname, opts, opts.redis == nil)
    redis_opt(fname, opts, lim)
    return lim
end

local function count_local(self, key, commit)
    local d = self.dict
    if not commit then
        local used = d:get(key)
        local remaining = self.limit - ((type(used) == "number" and used or 0) + 1)
        if remaining < 0 then return nil, "rejected" end
        return 0, remaining
    end
    local used, err = d:incr(key, 1, 0, self.window)
    if not used then return nil, err end
    if used > self.limit then
        d:incr(key, -1) -- a refused request does not count
        return nil, "rejected"
    end
    return 0, self.limit - used
end

-- lim:incoming(key, commit): 0, the requests left in the window; or nil,
-- "rejected".
function Count:incoming(key, commit)
    local fname = "lim:incoming(key, commit)"
    key = key_arg(fname, key)
    if redis_up(self) then
        local res, err = redis_eval(self, "count", key, self.limit,
            ceil(self.window * 1000), commit and 1 or 0)
        if res then
            local remaining, rejected = redis_answer(res)
            if not remaining then return nil, rejected end
            return 0, remaining
        end
        local v = redis_failed(self, fname, err)
        if v == 0 then return 0, self.limit end
        if v == false then return nil, "rejected" end
    elseif not self.dict then
        if self.on_redis_error == "deny" then return nil, "rejected" end
        return 0, self.limit
    end
    return count_local(self, key, commit)
end

-- lim:uncommit(key): gives one request back to the window; the requests
-- left.
function Count:uncommit(key)
    local fname = "lim:uncommit(key)"
    key = key_arg(fname, key)
    if redis_up(self) then
        local res = redis_eval(self, "count", key, self.limit,
            ceil(self.window * 1000), LEAKY_UNCOMMIT)
        if res then return tonumber(res) end
    end
    if not self.dict then return self.limit end
    local used = self.dict:incr(key, -1)
    if not used then return self.limit end
    if used < 0 then used = self.dict:incr(key, -used) end
    return self.limit - used
end

-- ---- mf.limit.conn -------------------------------------------------------

local Conn = {}
Conn.__index = Conn
Conn.allow = allow

function M.conn(opts)
    local fname = "mf.limit.conn(opts)"
    if type(opts) ~= "table" then argerror(fname, "a table expected, got " .. type(opts)) end
    local lim = setmetatable({
        max = number_opt(fname, opts, "max", 1),
        burst = number_opt(fname, opts, "burst", 0, 0),
        unit_delay = number_opt(fname, opts, "default_conn_delay", 0, 0.1),
        status = status_opt(fname, opts),
    }, Conn)
    lim.dict = dict_opt(fname, opts, opts.redis == nil)
    redis_opt(fname, opts, lim)
    return lim
end

local HELD = {} -- req.ctx[HELD]: the slots a request holds, given back at its end

local function redis_decr(self, key)
    local n, err = self.redis:call("DECR", self.prefix .. key)
    if not n then moonflow().log("warn", "mf.limit.conn: redis: " .. tostring(err)) end
    return n
end

-- Gives one slot of key back where it was taken (Redis, or the dict); at
-- a request's end (deferred) nothing may wait: a timer sends Redis's DECR.
local function conn_release(self, key, where, deferred)
    if where ~= "redis" then return self.dict:incr(key, -1) end
    if not deferred then return redis_decr(self, key) end
    moonflow().timer.at(0, redis_decr, self, key)
end

-- A slot taken inside a request goes back when the request ends, however
-- it ends, unless lim:leaving gave it back before.
local function conn_hold(self, key, where)
    local slot = { self = self, key = key, where = where }
    if not serve.at_end(function()
        if slot.self then
            slot.self = nil
            conn_release(self, key, where, true)
        end
    end) then
        return
    end
    local ctx = serve.ctx()
    local held = ctx[HELD]
    if not held then
        held = {}
        ctx[HELD] = held
    end
    held[#held + 1] = slot
end

local function conn_local(self, key, commit)
    local d = self.dict
    local most = self.max + self.burst
    local n, err
    if commit then
        n, err = d:incr(key, 1, 0)
        if not n then return nil, err end
        if n > most then
            d:incr(key, -1)
            return nil, "rejected"
        end
    else
        local v = d:get(key)
        n = (type(v) == "number" and v or 0) + 1
        if n > most then return nil, "rejected" end
    end
    return n, "dict"
end

local function conn_delay(self, n)
    if n > self.max then return self.unit_delay * floor((n - 1) / self.max) end
    return 0
end

-- lim:incoming(key, commit): delay, the requests in flight with this one;
-- or nil, "rejected". A committed one inside a request is given back when
-- the request ends (lim:leaving does it sooner).
function Conn:incoming(key, commit)
    local fname = "lim:incoming(key, commit)"
    key = key_arg(fname, key)
    local n, where
    if redis_up(self) then
        local res, err = redis_eval(self, "conn", key, self.max + self.burst, commit and 1 or 0)
        if res then
            n, where = redis_answer(res)
            if not n then return nil, where end
            where = "redis"
        else
            local v = redis_failed(self, fname, err)
            if v == 0 then return 0, 0 end
            if v == false then return nil, "rejected" end
        end
    elseif not self.dict then
        if self.on_redis_error == "deny" then return nil, "rejected" end
        return 0, 0
    end
    if not n then
        n, where = conn_local(self, key, commit)
        if not n then return nil, where end
    end
    if commit then conn_hold(self, key, where) end
    return conn_delay(self, n), n
end

-- lim:leaving(key [, req_latency]): gives back a slot of key now; with the
-- request's latency (seconds) the delay unit follows it (resty's rule).
-- The requests left in flight (nil for Redis: the DECR is on its way).
function Conn:leaving(key, req_latency)
    local fname = "lim:leaving(key [, req_latency])"
    key = key_arg(fname, key)
    if req_latency ~= nil then
        if type(req_latency) ~= "number" or req_latency < 0 then
            argerror(fname, "req_latency: a number of seconds >= 0 expected, got " .. tostring(req_latency))
        end
        self.unit_delay = (req_latency + self.unit_delay) / 2
    end
    local ok, ctx = pcall(serve.ctx)
    local held = ok and ctx[HELD]
    if held then -- a slot this request holds: given back once only
        for i = #held, 1, -1 do
            local slot = held[i]
            if slot.self == self and slot.key == key then
                slot.self = nil
                table.remove(held, i)
                return conn_release(self, key, slot.where)
            end
        end
    end
    return conn_release(self, key, self.redis and redis_up(self) and "redis" or "dict")
end

-- lim:uncommit(key): as leaving, without the latency.
function Conn:uncommit(key)
    return self:leaving(key_arg("lim:uncommit(key)", key))
end

-- ---- a route's limits (serve's config: routes[path].limit) ---------------

-- What of the request a route's limit counts by (the config checked the
-- names at start).
local function key_of(name)
    if name == nil or name == "remote_addr" then
        return serve._peer_key_fn() -- its bytes: formatting it costs more
    elseif name == "uri" then
        return function(req) return req.path end
    elseif name == "host" then
        return function(req) return req.headers.host or "" end
    elseif name == "global" then
        return function() return "" end
    end
    local header = name:match("^header:(.+)$")
    if not header then error("limit key " .. name .. ": unknown", 0) end
    return function(req) return req.headers[header] or "" end
end

local MAKERS = { req = M.req, conn = M.conn, count = M.count }
local NUMBERS = { rate = true, burst = true, max = true, limit = true,
                  window = true, status = true }

-- route(handler, spec, path): the handler (a function or a table of
-- phases) with the limits of spec (lines "kind\tname=value...", from the
-- config) checked before it: a refused request is answered with the
-- limit's status, a delayed one waits; keys are the route's own.
function M.route(handler, spec, path)
    local checks = {}
    for line in spec:gmatch("[^\n]+") do
        local kind = line:match("^(%a+)")
        local opts = {}
        for name, value in line:gmatch("\t([%w_]+)=([^\t]*)") do
            opts[name] = NUMBERS[name] and tonumber(value) or value
        end
        local key_name, dict_name = opts.key or "remote_addr", opts.dict
        local key = key_of(opts.key)
        opts.key = nil
        local lim = MAKERS[kind](opts)
        checks[#checks + 1] = { lim = lim, key = key, key_name = key_name,
                                dict_name = dict_name,
                                prefix = "route:" .. kind .. ":" .. path .. "|" }
    end
    local function admit(req, resp)
        for i = 1, #checks do
            local c = checks[i]
            if not c.lim:allow(c.prefix .. c.key(req), resp) then return false end
        end
        return true
    end
    local only = #checks == 1 and checks[1].lim
    if type(handler) == "function" and only and getmetatable(only) == Req
            and not only.redis and not only.clock then
        -- The usual route limit, a local limit.req: one C call a request
        -- (the dict joins the prefix to the key).
        local d, rate, burst, status = only.dict, only.rate, only.burst, only.status
        local key, prefix = checks[1].key, checks[1].prefix
        local reason = REASONS[status] or ""
        local limit_peer, dp
        if checks[1].key_name == "remote_addr" and type(checks[1].dict_name) == "string" then
            limit_peer, dp = serve._limit_peer(checks[1].dict_name)
        end
        if limit_peer then -- the client's address: the key never leaves C
            return function(req, resp)
                local excess = limit_peer(dp, rate, burst, prefix)
                if not excess then
                    resp.status = status
                    return resp:send(reason)
                end
                if excess >= rate * 0.001 then moonflow().sleep(excess / rate * 1000) end
                return handler(req, resp)
            end
        end
        return function(req, resp)
            local excess = leaky(d, key(req), rate, burst, LEAKY_COMMIT, nil, prefix)
            if not excess then
                resp.status = status
                return resp:send(reason)
            end
            if excess >= rate * 0.001 then moonflow().sleep(excess / rate * 1000) end
            return handler(req, resp)
        end
    elseif type(handler) == "function" and #checks == 1 then
        local lim, key, prefix = checks[1].lim, checks[1].key, checks[1].prefix
        return function(req, resp)
            if lim:allow(prefix .. key(req), resp) then return handler(req, resp) end
        end
    elseif type(handler) == "function" then
        return function(req, resp)
            if admit(req, resp) then return handler(req, resp) end
        end
    end
    local phases = {}
    for k, v in pairs(handler) do phases[k] = v end
    local access = handler.access
    phases.access = function(req, resp)
        if admit(req, resp) and access then return access(req, resp) end
    end
    return phases
end

return M
