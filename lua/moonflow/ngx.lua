-- moonflow.ngx — OpenResty's `ngx` API, the part moonflow has an answer
-- for, so Lua libraries written for OpenResty load unchanged: require
-- "moonflow.ngx" installs the global `ngx` (in handlers and scripts alike)
-- and returns it. Calls map onto moonflow's own:
--
--   ngx.null, ngx.log and the levels (ngx.ERR ...), ngx.sleep (seconds),
--   ngx.now / ngx.time / ngx.update_time / ngx.today, ngx.re.*,
--   ngx.encode_base64 / decode_base64, ngx.md5 / md5_bin, ngx.sha1_bin,
--   ngx.hmac_sha1, ngx.escape_uri / unescape_uri, ngx.encode_args /
--   decode_args, ngx.quote_sql_str, ngx.timer.at / every, ngx.thread.spawn
--   / wait, ngx.worker.id / count / pid / exiting, ngx.config, ngx.shared
--   (moonflow's shared dicts, when there are any), ngx.socket.tcp / udp /
--   connect (mf.socket's cosockets; sslhandshake verifies unless told
--   not to), and, in a handler wrapped with ngx.handler(fn), the request:
--   ngx.var (http_*, cookie_*, arg_*, uri, request_uri, args,
--   request_method, remote_addr), ngx.header (the response's headers),
--   ngx.req.get_headers / get_method / get_uri_args / get_body_data /
--   read_body; ngx.location.capture / capture_multi (subrequests, under
--   moonflow serve).
--
-- What has no moonflow answer yet is left out rather than faked: a
-- library that reaches for it gets nil (ngx.say, ngx.exit ...).
local mf = require "moonflow"

local select = select

local ngx = rawget(_G, "ngx") or {}

ngx.null = mf.null
ngx.OK, ngx.ERROR, ngx.AGAIN, ngx.DONE, ngx.DECLINED = 0, -1, -2, -4, -5

-- Levels: nginx's numbers, which mf.log's names follow in order.
local levels = { "emerg", "alert", "crit", "error", "warn", "notice", "info", "debug" }
ngx.STDERR, ngx.EMERG, ngx.ALERT, ngx.CRIT = 0, 1, 2, 3
ngx.ERR, ngx.WARN, ngx.NOTICE, ngx.INFO, ngx.DEBUG = 4, 5, 6, 7, 8

function ngx.log(level, ...)
    local name = levels[level] or (level == 0 and "error")
    if not name then error("ngx.log: bad log level " .. tostring(level), 2) end
    return mf.log(name, ...)
end

function ngx.sleep(seconds) return mf.sleep(seconds * 1000) end
function ngx.now() return mf.now() / 1000 end
ngx.time = os.time
function ngx.update_time() end -- mf.now() is the loop's time, updated each turn
function ngx.today() return os.date("%Y-%m-%d") end

ngx.re = {
    match = mf.re.match, find = mf.re.find, gmatch = mf.re.gmatch,
    sub = mf.re.sub, gsub = mf.re.gsub,
}

function ngx.encode_base64(s, no_padding)
    local text = mf.base64.encode(s)
    if no_padding then text = text:gsub("=+$", "") end
    return text
end
function ngx.decode_base64(s) return (mf.base64.decode(s)) end
function ngx.md5_bin(s) return mf.crypto.md5(s) end
function ngx.md5(s) return mf.hex.encode(mf.crypto.md5(s)) end
function ngx.sha1_bin(s) return mf.crypto.sha1(s) end
function ngx.hmac_sha1(key, s) return mf.crypto.hmac("sha1", key, s) end
function ngx.escape_uri(s) return mf.uri.escape(s) end
function ngx.unescape_uri(s)
    local plain = s:gsub("%+", " ")
    return mf.uri.unescape(plain) or plain -- a bad escape stays as sent
end
ngx.encode_args = mf.uri.encode_args
ngx.decode_args = mf.uri.decode_args

-- SQL string literal as ngx.quote_sql_str writes it (MySQL escapes).
local sql_escapes = { ["\0"] = "\\0", ["\b"] = "\\b", ["\n"] = "\\n", ["\r"] = "\\r",
                      ["\t"] = "\\t", ["\26"] = "\\Z", ["\\"] = "\\\\", ["'"] = "\\'",
                      ['"'] = '\\"' }
function ngx.quote_sql_str(s)
    return "'" .. s:gsub("[%z\b\n\r\t\26\\'\"]", sql_escapes) .. "'"
end

-- Timers: fn(premature, ...) as OpenResty calls them (premature is always
-- false: moonflow aborts pending timers at shutdown instead).
ngx.timer = {}
function ngx.timer.at(delay, fn, ...)
    local h = mf.timer.at(delay * 1000, fn, false, ...)
    return h ~= nil and true or nil
end
function ngx.timer.every(delay, fn, ...)
    local h = mf.timer.every(delay * 1000, fn, false, ...)
    return h ~= nil and true or nil
end

ngx.thread = {}
function ngx.thread.spawn(fn, ...) return mf.spawn(fn, ...) end
local function drop_first(_, ...) return ... end
function ngx.thread.wait(...)
    if select("#", ...) == 1 then return (...):wait() end
    return drop_first(mf.wait_any(...)) -- ok and results of the first to end
end

local ok_ffi, ffi = pcall(require, "ffi")
if ok_ffi then pcall(ffi.cdef, "int getpid(void);") end
ngx.worker = {
    id = function() return mf.worker.id end,
    count = function() return mf.worker.count end,
    pid = function() return ok_ffi and ffi.C.getpid() or 0 end,
    exiting = function() return false end,
}

ngx.config = {
    subsystem = "http",
    debug = false,
    nginx_version = 1022001,
    ngx_lua_version = 10023,
    nginx_configure = function() return "" end,
    prefix = function() return "" end,
}

-- Cosockets.
ngx.socket = { tcp = mf.socket.tcp, udp = mf.socket.udp, connect = mf.socket.connect }

-- The request of the running handler, for ngx.var, ngx.header and ngx.req:
-- ngx.handler(fn) binds (req, resp) to the handler's coroutine while fn
-- runs (coroutine threads are reused, so it unbinds on every exit path).
-- Lua threads the handler spawns have no request of their own.
local running, xpcall, error, traceback = coroutine.running, xpcall, error, debug.traceback
local bound = setmetatable({}, { __mode = "k" })

local function current(what)
    local r = bound[running()]
    if not r then
        error(what .. ": no request here (a handler wrapped with ngx.handler has one)", 3)
    end
    return r
end

-- A raise in fn keeps the traceback of where it happened (the server's
-- log line would otherwise show only this wrapper's).
local function with_traceback(err)
    if type(err) == "string" then return traceback(err, 2) end
    return err
end

function ngx.handler(fn)
    return function(req, resp)
        local co = running()
        bound[co] = { req = req, resp = resp }
        local ok, err = xpcall(fn, with_traceback, req, resp)
        bound[co] = nil
        if not ok then error(err, 0) end
    end
end

local function header_name(name) return (name:gsub("_", "-")) end

local var_prefixes = {
    http = function(req, rest) return req.headers[header_name(rest)] end,
    cookie = function(req, rest) return req.cookies[rest] end,
    arg = function(req, rest)
        local v = req.query[rest]
        if type(v) == "table" then v = v[1] end
        if v == true then return "" end
        return v
    end,
}
local var_names = {
    uri = function(req) return req.path end,
    request_uri = function(req) return req.uri end,
    args = function(req) return req.uri:match("%?(.*)$") end,
    request_method = function(req) return req.method end,
    remote_addr = function(req) return req.peer and req.peer:match("^%[?(.-)%]?:%d+$") end,
}

ngx.var = setmetatable({}, {
    __index = function(_, name)
        local req = current("ngx.var").req
        local f = var_names[name]
        if f then return f(req) end
        local prefix, rest = name:match("^(%a+)_(.+)$")
        f = prefix and var_prefixes[prefix]
        if f then return f(req, rest) end
        return nil
    end,
    __newindex = function() error("ngx.var: variables are read-only here", 2) end,
})

-- Header names in any spelling, "_" for "-" (as OpenResty reads them):
-- the response's key that matches, or the name as given.
local function header_key(headers, name)
    name = header_name(name)
    if headers[name] ~= nil then return name end
    local lname = name:lower()
    for k in pairs(headers) do
        if type(k) == "string" and k:lower() == lname then return k end
    end
    return name
end

ngx.header = setmetatable({}, {
    __index = function(_, name)
        local headers = current("ngx.header").resp.headers
        return headers[header_key(headers, name)]
    end,
    __newindex = function(_, name, value)
        local headers = current("ngx.header").resp.headers
        headers[header_key(headers, name)] = value
    end,
})

ngx.req = {
    get_headers = function() return current("ngx.req").req.headers end,
    get_method = function() return current("ngx.req").req.method end,
    get_uri_args = function() return current("ngx.req").req.query end,
    get_body_data = function() return current("ngx.req").req.body end,
    read_body = function() current("ngx.req") end, -- bodies are read before the handler
}

-- mf.shared's dicts under their names (a table that looks them up).
ngx.shared = mf.shared or setmetatable({}, { __index = function() return nil end })

-- Subrequests (moonflow serve): ngx.location.capture/capture_multi run
-- through mf.capture; options method (ngx.HTTP_*), body and args; the
-- result's header is mf.capture's headers (any spelling finds a name).
ngx.HTTP_GET, ngx.HTTP_HEAD, ngx.HTTP_POST, ngx.HTTP_PUT = 2, 4, 8, 16
ngx.HTTP_DELETE, ngx.HTTP_OPTIONS, ngx.HTTP_PATCH = 32, 512, 16384
local capture_methods = { [2] = "GET", [4] = "HEAD", [8] = "POST", [16] = "PUT",
                          [32] = "DELETE", [512] = "OPTIONS", [16384] = "PATCH" }
local function capture_opts(o)
    if o == nil then return nil end
    for k in pairs(o) do
        if k ~= "method" and k ~= "body" and k ~= "args" then
            error("ngx.location.capture: option '" .. tostring(k) .. "' is not supported", 3)
        end
    end
    local method = o.method and capture_methods[o.method]
    if o.method and not method then
        error("ngx.location.capture: method " .. tostring(o.method) .. " is not supported", 3)
    end
    return { method = method, body = o.body, args = o.args }
end
local function capture_res(r)
    return { status = r.status, header = r.headers, body = r.body, truncated = false }
end
ngx.location = {
    capture = function(uri, o) return capture_res(mf.capture(uri, capture_opts(o))) end,
    capture_multi = function(list)
        local reqs = {}
        for i, one in ipairs(list) do reqs[i] = { one[1], capture_opts(one[2]) } end
        local res = mf.capture_multi(reqs)
        for i = 1, #res do res[i] = capture_res(res[i]) end
        return unpack(res, 1, #reqs)
    end,
}

-- phases
-- ngx.get_phase, ngx.exit, ngx.ctx and ngx.on_abort over moonflow.serve's
-- request phases (lua/README.md, "Request phases"). Outside `moonflow
-- serve` the phase is "timer" (as OpenResty's resty command runs code).
do
    local serve = require "moonflow.serve"
    function ngx.get_phase() return serve.phase() or "timer" end
    ngx.exit = serve.exit
    ngx.on_abort = serve.on_abort
    -- ngx.ctx is the running request's req.ctx: read through ngx's
    -- metatable (whatever __index was there before still answers the rest).
    local mt = getmetatable(ngx) or {}
    local index = mt.__index
    mt.__index = function(t, k)
        if k == "ctx" then return serve.ctx() end
        if type(index) == "function" then return index(t, k) end
        if index ~= nil then return index[k] end
    end
    setmetatable(ngx, mt)
end
-- end phases

_G.ngx = ngx
return ngx
