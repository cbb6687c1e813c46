-- moonflow — the Lua API (require "moonflow"). Thin: a flow step is a plain
-- table {kind = ..., fields} (the kinds are registered in C: timer, http,
-- go, redis, and any the embedding program adds) checked, built and run by
-- the C side (moonflow.core, moonflow.flow, moonflow.timer, moonflow.redis,
-- moonflow.mysql: r:call, db:query and friends are C methods of the client
-- objects); this file names things, raises misuse at the caller's line, and
-- turns task results into (value) / (nil, err).
local core = require "moonflow.core"
local cflow = require "moonflow.flow"
local ctimer = require "moonflow.timer"
local credis = require "moonflow.redis"
local cmysql = require "moonflow.mysql"
local cjson = require "moonflow.json"
require "moonflow.coroutine" -- waits inside plain coroutines

local select, setmetatable, getmetatable = select, setmetatable, getmetatable
local type, error, pairs, pcall, unpack = type, error, pairs, pcall, unpack
local tostring, sort, concat = tostring, table.sort, table.concat
local getinfo = debug.getinfo

local mf = { _VERSION = "0.1.0" }

-- Misuse is raised at the script's line (moonflow.raise).
local raise = require "moonflow.raise"

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

-- usage names the function for misuse ("mf.http.get(url [, opts])").
local function copy_opts(opts, into, usage)
    if opts ~= nil and type(opts) ~= "table" then
        raise(("%s: opts: a table expected, got %s"):format(
            usage or "options", type(opts)))
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

-- mf.graph{ a = step, b = { step, after = {"a"} }, ... } [, {on_failure =
-- "skip" | "run"}]: a DAG of steps, checked here (names, after lists, no
-- cycle) and run as one C graph; its result maps each name to its step's.
function mf.graph(nodes, opts)
    local ok, desc = pcall(cflow.graph, nodes, opts)
    if not ok then raise(desc) end
    return step("graph", desc)
end

mf.task = {}

function mf.task.timer(ms, opts)
    if type(ms) ~= "number" or ms < 0 then
        raise("mf.task.timer(ms): a number >= 0 expected")
    end
    return step("timer", copy_opts(opts, { ms = ms }, "mf.task.timer(ms [, opts])"))
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
        if type(name.name) ~= "string" then
            raise("mf.task.go{name = , args = {...}}: name: a string expected, got "
                .. type(name.name))
        end
        local fields = copy_opts(name, {})
        local args = fields.args or {}
        fields.args = { n = #args, unpack(args) }
        return step("go", fields)
    end
    if type(name) ~= "string" then raise("mf.task.go(name, ...): name expected") end
    return step("go", { name = name, args = { n = select("#", ...), ... } })
end

-- mf.task.lua(fn, ...) or mf.task.lua{fn = , args = {...}, timeout = }: fn
-- runs in a coroutine of its own as one step; result.values = {n, ...}.
function mf.task.lua(fn, ...)
    if type(fn) == "table" then
        local fields = copy_opts(fn, {})
        local args = fields.args or {}
        fields.args = { n = args.n or #args, unpack(args, 1, args.n or #args) }
        return step("lua", fields)
    end
    if type(fn) ~= "function" then raise("mf.task.lua(fn, ...): a function expected") end
    return step("lua", { fn = fn, args = { n = select("#", ...), ... } })
end

-- Workflow's primitives as steps (moonflow.workflow): named counters,
-- conditionals waiting for a named signal, resource pools.
local workflow = require "moonflow.workflow"
function mf.task.counter(name, n) return workflow.counter(mf.task.lua, name, n) end
function mf.task.conditional(name) return workflow.conditional(mf.task.lua, name) end
mf.count, mf.signal = workflow.count, workflow.signal

-- A result table of a failed task becomes nil, err.
local function value_of(r)
    if r.state ~= "success" then return nil, r.error end
    return r
end

-- mf.task.dns(host [, opts]): a step resolving host (result.addresses);
-- mf.dns.resolve(host): the addresses, or nil, err.
function mf.task.dns(host, opts)
    if type(host) ~= "string" then raise("mf.task.dns(host [, opts]): a name expected") end
    return step("dns", copy_opts(opts, { host = host }, "mf.task.dns(host [, opts])"))
end

mf.dns = {}

function mf.dns.resolve(host)
    if type(host) ~= "string" then
        raise("mf.dns.resolve(host): a name expected, got " .. type(host))
    end
    local r, err = value_of(mf.task.dns(host):wait())
    if not r then return nil, err end
    return r.addresses
end

mf.http = {}

function mf.http.request(req)
    if type(req) ~= "table" or type(req.url) ~= "string" then
        raise("mf.http.request{url = ...}: url expected")
    end
    local r, err = value_of(mf.task.http(req):wait())
    if not r then return nil, err end
    r.state = nil
    return r
end

local function check_url(usage, url)
    if type(url) ~= "string" then
        raise(("%s: url: a string expected, got %s"):format(usage, type(url)))
    end
end

function mf.http.get(url, opts)
    local usage = "mf.http.get(url [, opts])"
    check_url(usage, url)
    return mf.http.request(copy_opts(opts, { url = url, method = "GET" }, usage))
end

function mf.http.post(url, body, opts)
    local usage = "mf.http.post(url, body [, opts])"
    check_url(usage, url)
    if body ~= nil and type(body) ~= "string" then
        raise(usage .. ": body: a string expected, got " .. type(body))
    end
    return mf.http.request(copy_opts(opts,
        { url = url, method = "POST", body = body }, usage))
end

function mf.go(name, ...)
    local fname = type(name) == "table" and name.name or name
    if type(fname) ~= "string" then
        raise("mf.go(name, ...): name: a string expected, got " .. type(fname))
    end
    local r, err = value_of(mf.task.go(name, ...):wait())
    if not r then return nil, err end
    return r.value
end

mf.timer = { at = ctimer.at, every = ctimer.every }

-- Redis. mf.null stands for a nil reply (inside arrays too); it is a NULL
-- light userdata, so mf.null == mf.json.null == ngx.null.
mf.null = credis.null

-- One client object per URL and options on this host (the C client is
-- shared per loop anyway): calling mf.redis or mf.mysql per request costs
-- a lookup. make(url, opts) builds one (raising on a bad URL or option).
local function cached_clients(name, make)
    local clients = {}
    return function(url, opts)
        if type(url) ~= "string" then
            raise(("mf.%s(url [, opts]): url expected"):format(name))
        end
        local key = url
        if opts ~= nil then
            if type(opts) ~= "table" then
                raise(("mf.%s: options must be a table"):format(name))
            end
            local parts = {}
            for k, v in pairs(opts) do parts[#parts + 1] = tostring(k) .. "=" .. tostring(v) end
            sort(parts)
            key = url .. "\0" .. concat(parts, "\0")
        end
        local c = clients[key]
        if c then return c end
        local ok, res = pcall(make, url, opts)
        if not ok then raise(res) end
        clients[key] = res
        return res
    end
end

mf.redis = cached_clients("redis", credis.client)

-- mf.task.redis(r, cmd, ...[, opts]), mf.task.redis(r, {cmd, ...}[, opts])
-- or mf.task.redis(r, {{cmd, ...}, {cmd, ...}}[, opts]): a trailing table
-- holds the task options (timeout, callback). A list of commands gives
-- result.values, one command result.value.
local REDIS = "mf.task.redis(r, cmd, ... [, opts])"
function mf.task.redis(r, cmd, ...)
    if getmetatable(r) ~= "moonflow.redis" then
        raise("mf.task.redis(r, ...): r must be a client from mf.redis")
    end
    if type(cmd) == "table" then
        local opts = ...
        if type(cmd[1]) == "table" then
            return step("redis", copy_opts(opts, { client = r, cmds = cmd, list = true }, REDIS))
        end
        return step("redis", copy_opts(opts, { client = r, cmds = { cmd } }, REDIS))
    end
    local n = select("#", ...)
    local args = { cmd, ... }
    local opts
    if n > 0 and type(args[n + 1]) == "table" then
        opts = args[n + 1]
        args[n + 1] = nil
    end
    return step("redis", copy_opts(opts, { client = r, cmds = { args } }, REDIS))
end

-- MySQL. One client object per URL and options on this host, as mf.redis.
-- db:query, db:quote and db:transaction are C methods; db:rows and
-- db:session are wrapped here, where a C call that resumed can still raise.
mf.mysql = cached_clients("mysql", cmysql.client)

-- The for-loop iterator of db:rows: the C side hands out the rows of the
-- batch in hand and answers true when it had to wait for the next one.
local mysql_next = cmysql.rows_next
local function mysql_rows_iter(st)
    while true do
        local row, err = mysql_next(st)
        if row ~= true then
            if row == nil and err then error(err, 0) end
            return row
        end
    end
end

local function mysql_rows(db, sql, ...)
    local ok, st = pcall(cmysql.rows, db, sql, ...)
    if not ok then raise(st) end
    return mysql_rows_iter, st
end
cmysql.db_methods.rows = mysql_rows
cmysql.pinned_methods.rows = mysql_rows

-- db:session: the C side answers true, fn's returns, or false, fn's error
-- (re-raised here, once the connection went back).
local csession = cmysql.session
local function session_answer(ok, ...)
    if ok == false then error((...), 0) end
    return ...
end
function cmysql.db_methods.session(db, fn, ...)
    return session_answer(csession(db, fn, ...))
end

-- mf.task.mysql(db, sql, ...[, opts]) or mf.task.mysql{db = , sql = ,
-- args = {...}, rows = , timeout = , callback = }: a trailing table (never
-- a parameter) holds the task options.
function mf.task.mysql(db, sql, ...)
    if getmetatable(db) ~= "moonflow.mysql" then
        if type(db) ~= "table" then
            raise("mf.task.mysql(db, sql, ...): db must be a client from mf.mysql")
        end
        local fields = copy_opts(db, {})
        if type(fields.args) == "table" and fields.args.n == nil then
            fields.args = { n = #fields.args, unpack(fields.args) }
        end
        return step("mysql", fields)
    end
    if type(sql) ~= "string" then raise("mf.task.mysql(db, sql, ...): sql expected") end
    local n = select("#", ...)
    local args = { n = n, ... }
    local opts
    if n > 0 and type(args[n]) == "table" then
        opts = args[n]
        args[n] = nil
        args.n = n - 1
    end
    return step("mysql", copy_opts(opts, { db = db, sql = sql, args = args },
        "mf.task.mysql(db, sql, ... [, opts])"))
end

-- Kafka. mf.kafka(conf): the producer object for these librdkafka
-- properties on this host (the C side caches it by its sorted properties,
-- and every host shares the process's one librdkafka producer for them).
-- k:produce, k:metadata, k:create_topic and k:consumer are C methods.
local ckafka = require "moonflow.kafka"
function mf.kafka(conf)
    if type(conf) ~= "table" then
        raise("mf.kafka(conf): conf must be a table of librdkafka properties")
    end
    local ok, k = pcall(ckafka.open, conf)
    if not ok then raise(k) end
    return k
end

-- mf.task.kafka_produce(k, msg[, opts]): a trailing table holds the task
-- options (timeout, callback); the result has partition and offset.
function mf.task.kafka_produce(k, msg, opts)
    if getmetatable(k) ~= "moonflow.kafka" then
        raise("mf.task.kafka_produce(k, msg): k must be a producer from mf.kafka")
    end
    if type(msg) ~= "table" then
        raise("mf.task.kafka_produce(k, msg): msg must be a table")
    end
    return step("kafka_produce", copy_opts(opts, { producer = k, message = msg },
        "mf.task.kafka_produce(k, msg [, opts])"))
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

-- mf.json: our encoder (moonflow.json, C: integers in full, no copy for
-- resp:json), lua-cjson's decoder when it is installed.
local luacjson_ok, luacjson = pcall(require, "cjson.safe")
local decode_missing = function()
    raise("mf.json.decode needs lua-cjson (cjson.so on package.cpath)")
end
mf.json = {
    encode = cjson.encode,
    decode = luacjson_ok and function(s)
        if type(s) ~= "string" then
            raise("mf.json.decode(s): a string expected, got " .. type(s))
        end
        return luacjson.decode(s)
    end or decode_missing,
    null = cjson.null,
}

-- Bytes as text and back, digests, query strings (C: moonflow.codec,
-- moonflow.crypto, moonflow.uri).
local ccodec = require "moonflow.codec"
mf.base64, mf.hex = ccodec.base64, ccodec.hex
mf.crypto = require "moonflow.crypto"
mf.uri = require "moonflow.uri"
mf.re = require "moonflow.re"

-- Cosockets (moonflow.socket, C): mf.socket.tcp(), mf.socket.udp(), and
-- mf.socket.connect(host, port, opts), a tcp socket connected at once.
local csocket = require "moonflow.socket"
mf.socket = {
    tcp = csocket.tcp,
    udp = csocket.udp,
    connect = function(...)
        local sock = csocket.tcp()
        local done, ok, err = pcall(sock.connect, sock, ...)
        if not done then -- misuse, worded by sock:connect: named as called
            local at = ok:find("sock:connect", 1, true) or 1
            raise("mf.socket.connect" .. ok:sub(at + #"sock:connect"))
        end
        if not ok then return nil, err end
        return sock
    end,
}

-- Lua threads, semaphores and queues (moonflow.thread, on moonflow.wait).
local thread = require "moonflow.thread"
mf.spawn, mf.wait_any = thread.spawn, thread.wait_any

-- Subrequests exist in `moonflow serve` only, which replaces these
-- (lua/serve/capture.c, moonflow/capture.lua).
function mf.capture() raise("mf.capture: only inside a moonflow serve handler") end
function mf.capture_multi() raise("mf.capture_multi: only inside a moonflow serve handler") end
mf.semaphore, mf.queue = thread.semaphore, thread.queue
function mf.resource_pool(n)
    return workflow.resource_pool(mf.semaphore, mf.task.lua, n)
end

-- mf.log(level, ...) and mf.worker.id/count (C: moonflow.log).
local clog = require "moonflow.log"
mf.log, mf.worker = clog.log, clog.worker

mf.debug = { counts = core.counts }

-- Shared dicts (moonflow.shared, C): mf.shared.NAME is the process's dict
-- of that name (serve's `shared` config key, or mf.shared_dict(name,
-- bytes), which makes it if need be), the same one on every worker; nil
-- when there is none, as ngx.shared.NAME.
local cshared = require "moonflow.shared_ffi" -- moonflow.shared, faster under the JIT
mf.shared = setmetatable({}, { __index = function(t, name)
    local d = cshared.get(name)
    if d then rawset(t, name, d) end
    return d
end })
mf.shared_dict = cshared.create

-- Upstream groups (moonflow.upstream, C): mf.upstream(name, definition)
-- defines a group every client resolves as a URL's host; mf.upstream(name)
-- is the group, or nil.
mf.upstream = require("moonflow.upstream").define

-- User metrics (moonflow.metrics, C): counters, gauges and histograms in
-- the process's registry, summed over the workers when scraped.
mf.metrics = require "moonflow.metrics"

-- Rate and concurrency limits (moonflow.limit): req, conn, count (its
-- route() is serve's, for a route's config).
local limit = require "moonflow.limit"
mf.limit = { req = limit.req, conn = limit.conn, count = limit.count }

return mf
