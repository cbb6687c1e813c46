-- moonflow — the Lua API (require "moonflow"). Thin: a flow step is a plain
-- table {kind = ..., fields} (the kinds are registered in C: timer, http,
-- go, redis, and any the embedding program adds) checked, built and run by
-- the C side (moonflow.core, moonflow.flow, moonflow.timer, moonflow.redis:
-- r:call and friends are C methods of the client object); this file names
-- things, raises misuse at the caller's line, and turns task results into
-- (value) / (nil, err).
local core = require "moonflow.core"
local cflow = require "moonflow.flow"
local ctimer = require "moonflow.timer"
local credis = require "moonflow.redis"

local select, setmetatable, getmetatable = select, setmetatable, getmetatable
local type, error, pairs, pcall, unpack = type, error, pairs, pcall, unpack
local tostring, sort, concat = tostring, table.sort, table.concat
local getinfo = debug.getinfo

local mf = { _VERSION = "0.1.0" }

-- Raises msg at the first caller outside the embedded moonflow modules:
-- misuse is reported where the script made it.
local function raise(msg)
    local level = 2
    while true do
        local info = getinfo(level, "S")
        if not info or info.source:sub(1, 11) ~= "=[moonflow]" then break end
        level = level + 1
    end
    error(msg, level)
end

-- A flow step (task, series or parallel) knows how to wait for itself.
local Step = {}
Step.__index = Step

-- Builds the whole C tree, yields once, returns the results. A callback
-- that raised fails the flow: its error (with traceback) is raised here.
function Step:wait()
    local ok, res, err = pcall(cflow.wait, self)
    if not ok then raise(res) end
    if err then raise(err) end
    return res
end

local function step(kind, fields)
    fields.kind = kind
    return setmetatable(fields, Step)
end

local function copy_opts(opts, into)
    if opts ~= nil and type(opts) ~= "table" then
        raise("options must be a table")
    end
    for k, v in pairs(opts or {}) do into[k] = v end
    return into
end

local function list(kind, steps)
    if type(steps) ~= "table" then
        raise("mf." .. kind .. " expects a list of steps")
    end
    local s = {}
    for i = 1, #steps do
        if getmetatable(steps[i]) ~= Step then
            raise(("mf.%s: step %d is not a task, series or parallel"):format(
                kind, i))
        end
        s[i] = steps[i]
    end
    return step(kind, s)
end

mf.sleep = core.sleep
mf.now = core.now

function mf.series(steps) return list("series", steps) end
function mf.parallel(steps) return list("parallel", steps) end

mf.task = {}

function mf.task.timer(ms, opts)
    if type(ms) ~= "number" or ms < 0 then
        raise("mf.task.timer(ms): a number >= 0 expected")
    end
    return step("timer", copy_opts(opts, { ms = ms }))
end

function mf.task.http(req)
    if type(req) ~= "table" or type(req.url) ~= "string" then
        raise("mf.task.http{url = ...}: url expected")
    end
    local fields = copy_opts(req, {})
    if not fields.method then fields.method = fields.body and "POST" or "GET" end
    return step("http", fields)
end

-- mf.task.go(name, ...) or mf.task.go{name = , args = {...}, timeout = }.
function mf.task.go(name, ...)
    if type(name) == "table" then
        local fields = copy_opts(name, {})
        local args = fields.args or {}
        fields.args = { n = #args, unpack(args) }
        return step("go", fields)
    end
    if type(name) ~= "string" then raise("mf.task.go(name, ...): name expected") end
    return step("go", { name = name, args = { n = select("#", ...), ... } })
end

-- A result table of a failed task becomes nil, err.
local function value_of(r)
    if r.state ~= "success" then return nil, r.error end
    return r
end

mf.http = {}

function mf.http.request(req)
    local r, err = value_of(mf.task.http(req):wait())
    if not r then return nil, err end
    r.state = nil
    return r
end

function mf.http.get(url, opts)
    return mf.http.request(copy_opts(opts, { url = url, method = "GET" }))
end

function mf.http.post(url, body, opts)
    return mf.http.request(copy_opts(opts,
        { url = url, method = "POST", body = body }))
end

function mf.go(name, ...)
    local r, err = value_of(mf.task.go(name, ...):wait())
    if not r then return nil, err end
    return r.value
end

mf.timer = { at = ctimer.at, every = ctimer.every }

-- Redis. mf.null stands for a nil reply (inside arrays too); it is a NULL
-- light userdata, so mf.null == mf.json.null == ngx.null.
mf.null = credis.null

-- One client object per URL and options on this host (the C client is
-- shared per loop anyway): calling mf.redis per request costs a lookup.
local redis_clients = {}

local function redis_key(url, opts)
    if opts == nil then return url end
    if type(opts) ~= "table" then raise("mf.redis: options must be a table") end
    local parts = {}
    for k, v in pairs(opts) do parts[#parts + 1] = tostring(k) .. "=" .. tostring(v) end
    sort(parts)
    return url .. "\0" .. concat(parts, "\0")
end

function mf.redis(url, opts)
    if type(url) ~= "string" then raise("mf.redis(url [, opts]): url expected") end
    local key = redis_key(url, opts)
    local r = redis_clients[key]
    if r then return r end
    local ok, res = pcall(credis.client, url, opts)
    if not ok then raise(res) end
    redis_clients[key] = res
    return res
end

-- mf.task.redis(r, cmd, ...[, opts]), mf.task.redis(r, {cmd, ...}[, opts])
-- or mf.task.redis(r, {{cmd, ...}, {cmd, ...}}[, opts]): a trailing table
-- holds the task options (timeout, callback). A list of commands gives
-- result.values, one command result.value.
function mf.task.redis(r, cmd, ...)
    if getmetatable(r) ~= "moonflow.redis" then
        raise("mf.task.redis(r, ...): r must be a client from mf.redis")
    end
    if type(cmd) == "table" then
        local opts = ...
        if type(cmd[1]) == "table" then
            return step("redis", copy_opts(opts, { client = r, cmds = cmd, list = true }))
        end
        return step("redis", copy_opts(opts, { client = r, cmds = { cmd } }))
    end
    local n = select("#", ...)
    local args = { cmd, ... }
    local opts
    if n > 0 and type(args[n + 1]) == "table" then
        opts = args[n + 1]
        args[n + 1] = nil
    end
    return step("redis", copy_opts(opts, { client = r, cmds = { args } }))
end

-- mf.task.NAME{fields}: a task of any kind registered from C
-- (mf_lua_kind_register) that has no constructor of its own above. The C
-- side checks the fields when the task is waited on or built into a flow.
setmetatable(mf.task, { __index = function(task, name)
    if not cflow.has_kind(name) then return nil end
    local function make(fields)
        if type(fields) ~= "table" then
            raise(("mf.task.%s{...}: a table of fields expected"):format(name))
        end
        return step(name, copy_opts(fields, {}))
    end
    task[name] = make
    return make
end })

local ok, cjson = pcall(require, "cjson.safe")
if ok then
    local strict = require "cjson"
    mf.json = {
        encode = strict.encode,
        decode = cjson.decode,
        null = strict.null,
    }
else
    mf.json = setmetatable({}, { __index = function()
        raise("mf.json needs lua-cjson (cjson.so on package.cpath)")
    end })
end

mf.debug = { counts = core.counts }

return mf
