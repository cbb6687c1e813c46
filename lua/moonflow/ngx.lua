-- moonflow.ngx — OpenResty's `ngx` API, the part moonflow has an answer
-- for, so Lua libraries and handlers written for OpenResty run unchanged:
-- require "moonflow.ngx" installs the global `ngx` (in handlers and
-- scripts alike) and returns it. Calls map onto moonflow's own:
--
--   everywhere: ngx.null, ngx.log and nginx's levels, ngx.sleep, the
--   clock and dates (moonflow.ngx.time), ngx.re.* (moonflow.ngx.re, over
--   mf.re), base64, digests, crc32, URI escapes and args,
--   ngx.quote_sql_str, ngx.timer.*, ngx.thread.*, ngx.worker.*,
--   ngx.config.*, ngx.shared (moonflow's shared dicts), ngx.socket.*
--   (mf.socket's cosockets), the HTTP_* constants;
--   in a `moonflow serve` handler (or one wrapped with ngx.handler): the
--   request (moonflow.ngx.request finds it): ngx.var (moonflow.ngx.var),
--   ngx.req.*, ngx.header, ngx.resp.get_headers, ngx.status,
--   ngx.headers_sent, ngx.print / say / flush / eof / send_headers,
--   ngx.redirect, ngx.location.capture / capture_multi (mf.capture).
--
-- A request-bound call outside a request raises, naming the call; what
-- only nginx can do (ngx.exec, ngx.req.set_body_file ...) raises, naming
-- it; what has no answer at all is left out (nil) rather than faked.
local mf = require "moonflow"

local select = select

local ngx = rawget(_G, "ngx") or {}

ngx.null = mf.null
ngx.OK, ngx.ERROR, ngx.AGAIN, ngx.DONE, ngx.DECLINED = 0, -1, -2, -4, -5

-- HTTP status codes under nginx's names.
for name, code in pairs {
    HTTP_CONTINUE = 100, HTTP_SWITCHING_PROTOCOLS = 101, HTTP_OK = 200, HTTP_CREATED = 201,
    HTTP_ACCEPTED = 202, HTTP_NO_CONTENT = 204, HTTP_PARTIAL_CONTENT = 206,
    HTTP_SPECIAL_RESPONSE = 300, HTTP_MOVED_PERMANENTLY = 301, HTTP_MOVED_TEMPORARILY = 302,
    HTTP_SEE_OTHER = 303, HTTP_NOT_MODIFIED = 304, HTTP_TEMPORARY_REDIRECT = 307,
    HTTP_PERMANENT_REDIRECT = 308, HTTP_BAD_REQUEST = 400, HTTP_UNAUTHORIZED = 401,
    HTTP_PAYMENT_REQUIRED = 402, HTTP_FORBIDDEN = 403, HTTP_NOT_FOUND = 404,
    HTTP_NOT_ALLOWED = 405, HTTP_NOT_ACCEPTABLE = 406, HTTP_REQUEST_TIMEOUT = 408,
    HTTP_CONFLICT = 409, HTTP_GONE = 410, HTTP_UPGRADE_REQUIRED = 426,
    HTTP_TOO_MANY_REQUESTS = 429, HTTP_CLOSE = 444, HTTP_ILLEGAL = 451,
    HTTP_INTERNAL_SERVER_ERROR = 500, HTTP_METHOD_NOT_IMPLEMENTED = 501,
    HTTP_BAD_GATEWAY = 502, HTTP_SERVICE_UNAVAILABLE = 503, HTTP_GATEWAY_TIMEOUT = 504,
    HTTP_VERSION_NOT_SUPPORTED = 505, HTTP_INSUFFICIENT_STORAGE = 507,
} do ngx[name] = code end

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

-- ngx.now (the epoch, to the millisecond), time, today, localtime,
-- utctime, http_time, cookie_time, parse_http_time, update_time.
require "moonflow.ngx.time"(ngx)

ngx.re = require "moonflow.ngx.re"

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
-- CRC-32 (zlib's and nginx's): the short and the long form give the same
-- number (nginx only picks a loop for the length).
local crc32 = require("moonflow.codec").crc32
ngx.crc32_short, ngx.crc32_long = crc32, crc32
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

-- getpid under a name of our own (asm redirect): no clash with another
-- module's declaration of it.
local ok_ffi, ffi = pcall(require, "ffi")
if ok_ffi then pcall(ffi.cdef, 'int mf_ngx_getpid(void) __asm__("getpid");') end
ngx.worker = {
    id = function() return mf.worker.id end,
    count = function() return mf.worker.count end,
    pid = function() return ok_ffi and ffi.C.mf_ngx_getpid() or 0 end,
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


-- ---- the request ------------------------------------------------------------
-- The running request (moonflow.ngx.request): under `moonflow serve` the
-- handler's req and resp, found without a wrapper; ngx.handler(fn) binds
-- them explicitly. Lua threads the handler spawns (ngx.thread.spawn,
-- mf.spawn) are the request's too, as in OpenResty. current(what) raises,
-- naming the API, outside a request.
local request = require "moonflow.ngx.request"
local current, state = request.current, request.state
local running, xpcall, error, traceback = coroutine.running, xpcall, error, debug.traceback
local type, tostring, tonumber, pairs, setmetatable, rawset =
    type, tostring, tonumber, pairs, setmetatable, rawset
local concat, lower, gsub = table.concat, string.lower, string.gsub

-- A raise in fn keeps the traceback of where it happened (the server's
-- log line would otherwise show only this wrapper's).
local function with_traceback(err)
    if type(err) == "string" then return traceback(err, 2) end
    return err
end

function ngx.handler(fn)
    return function(req, resp)
        local co = running()
        local outer = request.bound[co] -- a wrapped handler calling another
        request.bound[co] = { req = req, resp = resp }
        local ok, err = xpcall(fn, with_traceback, req, resp)
        request.bound[co] = outer
        if not ok then error(err, 0) end
    end
end

-- Fields of ngx that are the request's (ngx.status, ngx.headers_sent,
-- ngx.is_subrequest): read and written through ngx's metatable; getters
-- and setters by name.
local getters, setters = {}, {}
setmetatable(ngx, {
    __index = function(_, k)
        local get = getters[k]
        if get then return get() end
    end,
    __newindex = function(t, k, v)
        local set = setters[k]
        if set then return set(v) end
        rawset(t, k, v)
    end,
})

local var = require "moonflow.ngx.var"(ngx)

-- ---- the response: status and headers ---------------------------------------

local function headers_sent(r)
    return state(r).headers_sent or r.resp.sent
end

function getters.headers_sent() return headers_sent(current("ngx.headers_sent")) and true or false end
function getters.status() return current("ngx.status").resp.status end
function setters.status(v)
    local r = current("ngx.status")
    if headers_sent(r) then
        return mf.log("error", "attempt to set ngx.status after sending out response headers")
    end
    local status = tonumber(v)
    if not status then error("ngx.status: a number expected, got " .. type(v), 3) end
    r.resp.status = status
end
function getters.is_subrequest()
    local r = current("ngx.is_subrequest")
    return r.req.subrequest ~= nil
end

local function header_name(name) return (gsub(name, "_", "-")) end

-- Header names in any spelling, "_" for "-" (as OpenResty reads them):
-- the response's key that matches, or the name as given.
local function header_key(headers, name)
    name = header_name(name)
    if headers[name] ~= nil then return name end
    local lname = lower(name)
    for k in pairs(headers) do
        if type(k) == "string" and lower(k) == lname then return k end
    end
    return name
end

-- Fields the server writes itself (framing, connection, date): what a
-- handler sets is kept for it to read back, never sent (the server's
-- answer is framed by the server; a Content-Length set by hand cannot be
-- wrong then).
local MANAGED = { ["content-length"] = true, ["transfer-encoding"] = true,
                  connection = true, ["keep-alive"] = true, date = true }

local function header_value(what, v)
    local t = type(v)
    if t == "string" or t == "nil" then return v end
    if t == "number" or t == "boolean" then return tostring(v) end
    if t == "table" then
        if #v == 0 then return nil end -- an empty list removes the header
        local list = {}
        for i = 1, #v do list[i] = tostring(v[i]) end
        return list
    end
    error(what .. ": a string, number or list expected, got " .. t, 3)
end

ngx.header = setmetatable({}, {
    __index = function(_, name)
        local r = current("ngx.header")
        local lname = lower(header_name(name))
        if MANAGED[lname] then
            local m = state(r).managed
            return m and m[lname]
        end
        local headers = r.resp.headers
        return headers[header_key(headers, name)]
    end,
    __newindex = function(_, name, value)
        local r = current("ngx.header")
        if type(name) ~= "string" then error("ngx.header: a header name expected", 2) end
        value = header_value("ngx.header." .. name, value)
        if headers_sent(r) then
            return mf.log("error", "attempt to set ngx.header.", name,
                          " after sending out response headers")
        end
        local lname = lower(header_name(name))
        if MANAGED[lname] then
            local st = state(r)
            st.managed = st.managed or {}
            st.managed[lname] = value
            return
        end
        local headers = r.resp.headers
        headers[header_key(headers, name)] = value
    end,
})

-- A copy of a header table whose reads take any spelling and "_" for "-"
-- (the keys are lowercase), unless raw.
local normalized_mt = {
    __index = function(t, k)
        if type(k) ~= "string" then return nil end
        local n = lower(gsub(k, "_", "-"))
        if n ~= k then return rawget(t, n) end
    end,
}

-- Adds name = value (a string or a list) to t, counting each value against
-- max (0: no limit). false once max is reached.
local function add_header(t, name, value, count, max)
    if type(value) == "table" then
        for i = 1, #value do
            if max > 0 and count[1] >= max then return false end
            count[1] = count[1] + 1
            local now = t[name]
            if now == nil then t[name] = value[i]
            elseif type(now) == "table" then now[#now + 1] = value[i]
            else t[name] = { now, value[i] } end
        end
        return true
    end
    if max > 0 and count[1] >= max then return false end
    count[1] = count[1] + 1
    local now = t[name]
    if now == nil then t[name] = value
    elseif type(now) == "table" then now[#now + 1] = value
    else t[name] = { now, value } end
    return true
end

ngx.resp = {}
function ngx.resp.get_headers(max, raw)
    local r = current("ngx.resp.get_headers")
    max = max or 100
    local t, count = {}, { 0 }
    for k, v in pairs(r.resp.headers) do
        if type(k) == "string" and not add_header(t, raw and k or lower(k), v, count, max) then
            return raw and t or setmetatable(t, normalized_mt), "truncated"
        end
    end
    local managed = state(r).managed
    for k, v in pairs(managed or {}) do
        if not add_header(t, k, v, count, max) then
            return raw and t or setmetatable(t, normalized_mt), "truncated"
        end
    end
    return raw and t or setmetatable(t, normalized_mt)
end

-- ---- the response: the body -------------------------------------------------

-- OpenResty's argument of ngx.print/say: strings, numbers, booleans, nil,
-- ngx.null, and arrays of them, nested, written one after the other.
local function flatten(out, v, what, arg)
    local t = type(v)
    if t == "string" then out[#out + 1] = v
    elseif t == "number" or t == "boolean" or t == "nil" then out[#out + 1] = tostring(v)
    elseif v == ngx.null then out[#out + 1] = "null"
    elseif t == "table" then
        local n = #v
        for k in pairs(v) do
            if type(k) ~= "number" or k < 1 or k > n or k % 1 ~= 0 then
                error(("bad argument #%d to '%s' (non-array table found)"):format(arg, what), 0)
            end
        end
        for i = 1, n do flatten(out, v[i], what, arg) end
    else
        error(("bad argument #%d to '%s' (string, number, boolean, nil, ngx.null or " ..
               "array table expected, got %s)"):format(arg, what, t), 0)
    end
end

-- Streams data (the head goes out with the first piece): 1, or nil and
-- why not ("seen eof" after ngx.eof, "closed" when the client left).
local function output(r, data)
    local st = state(r)
    if st.eof or r.resp.sent then return nil, "seen eof" end
    st.headers_sent = true
    local ok, err = r.resp:write(data)
    if not ok then return nil, err end
    st.bytes = (st.bytes or 0) + #data
    return 1
end

local function print_with(what, newline, ...)
    local r = current("ngx." .. what)
    local out = {}
    for i = 1, select("#", ...) do flatten(out, (select(i, ...)), what, i) end
    if newline then out[#out + 1] = "\n" end
    return output(r, concat(out))
end

function ngx.print(...) return print_with("print", false, ...) end
function ngx.say(...) return print_with("say", true, ...) end

-- A 101 (Switching Protocols) head is no start of a body stream: it
-- goes out with the raw connection (ngx.req.socket(true)), as the
-- WebSocket servers ask for it; send_headers and flush only mark it sent.
local function upgrading(r, st)
    if r.resp.status ~= 101 then return false end
    st.headers_sent = true
    return true
end

-- The head goes out now (an empty piece of the stream).
function ngx.send_headers()
    local r = current("ngx.send_headers")
    if headers_sent(r) then return nil, "header already sent" end
    if upgrading(r, state(r)) then return 1 end
    return output(r, "")
end

-- Writes wait while the client is slow (above the server's high water),
-- so what was printed is already on its way; wait or not, flush sends the
-- head if it has not gone out.
function ngx.flush(wait)
    local r = current("ngx.flush")
    local st = state(r)
    if st.eof or r.resp.sent then return nil, "seen eof" end
    if not st.headers_sent and not upgrading(r, st) then return output(r, "") end
    return 1
end

-- Ends the answer (the stream's last chunk, or the head with an empty
-- body); the handler may go on working.
function ngx.eof()
    local r = current("ngx.eof")
    local st = state(r)
    if st.eof then return nil, "seen eof" end
    st.eof, st.headers_sent = true, true
    if not r.resp.sent then
        request.answered(r)
        r.resp:send()
    end
    return 1
end

local REDIRECTS = { [301] = true, [302] = true, [303] = true, [307] = true, [308] = true }
function ngx.redirect(uri, status)
    local r = current("ngx.redirect")
    status = status or 302
    if type(uri) ~= "string" then error("ngx.redirect: a uri string expected", 2) end
    if not REDIRECTS[status] then
        error("ngx.redirect: only ngx.HTTP_MOVED_TEMPORARILY, ngx.HTTP_MOVED_PERMANENTLY, " ..
              "ngx.HTTP_PERMANENT_REDIRECT, ngx.HTTP_SEE_OTHER and " ..
              "ngx.HTTP_TEMPORARY_REDIRECT are allowed", 2)
    end
    local st = state(r)
    if st.headers_sent or r.resp.sent then
        error("ngx.redirect: the response headers were already sent", 2)
    end
    st.eof, st.headers_sent = true, true
    request.answered(r, status)
    r.resp:redirect(uri, status)
    local exit = rawget(ngx, "exit")
    if exit then return exit(status) end
end

-- ---- ngx.req ------------------------------------------------------------------

ngx.req = {}

local function changed(r)
    request.changed = true
    return state(r)
end

-- The head's fields in the client's spelling ("Name: value" lines of
-- req.raw_header), for get_headers(max, true).
local function raw_fields(req)
    local raw = req.raw_header
    if not raw then return nil end
    local fields, first = {}, true
    for line in raw:gmatch("([^\n]*)\n") do
        local name, value = line:match("^([^:]+):[ \t]*(.-)[ \t\r]*$")
        if name and not first then fields[#fields + 1] = { name, value } end
        first = false
    end
    return fields
end

function ngx.req.get_headers(max, raw)
    local r = current("ngx.req.get_headers")
    max = max or 100
    local t, count = {}, { 0 }
    local fields = raw and not state(r).headers_changed and raw_fields(r.req)
    if fields then
        for i = 1, #fields do
            if not add_header(t, fields[i][1], fields[i][2], count, max) then
                return t, "truncated"
            end
        end
        return t
    end
    for k, v in pairs(r.req.headers) do
        if not add_header(t, k, v, count, max) then
            return raw and t or setmetatable(t, normalized_mt), "truncated"
        end
    end
    return raw and t or setmetatable(t, normalized_mt)
end

-- Changes the request's headers as ngx.req.get_headers, ngx.var.http_*,
-- req.headers and the subrequests of mf.capture see them (req:header
-- reads the head as it came).
local function set_request_header(what, name, value)
    local r = current(what)
    if type(name) ~= "string" then error(what .. ": a header name expected", 3) end
    value = header_value(what, value)
    changed(r).headers_changed = true
    r.req.headers[lower(name)] = value
end
function ngx.req.set_header(name, value) set_request_header("ngx.req.set_header", name, value) end
function ngx.req.clear_header(name) set_request_header("ngx.req.clear_header", name, nil) end

local function current_args(r)
    return var.args_of(r) or ""
end

function ngx.req.get_uri_args(max)
    local r = current("ngx.req.get_uri_args")
    return mf.uri.decode_args(current_args(r), max or 100)
end

function ngx.req.set_uri_args(args)
    local r = current("ngx.req.set_uri_args")
    if type(args) == "table" then args = mf.uri.encode_args(args)
    elseif type(args) == "number" then args = tostring(args)
    elseif type(args) ~= "string" then
        error("ngx.req.set_uri_args: a string or a table expected, got " .. type(args), 2)
    end
    changed(r).args = args
end

function ngx.req.set_uri(uri, jump)
    local r = current("ngx.req.set_uri")
    if type(uri) ~= "string" or uri == "" then
        error("ngx.req.set_uri: a non-empty uri string expected", 2)
    end
    if jump then
        error("ngx.req.set_uri: jump (an internal redirect) is not supported outside nginx", 2)
    end
    changed(r).uri = uri
end

-- The body is read before the handler runs: read_body has nothing to do.
function ngx.req.read_body() current("ngx.req.read_body") end
function ngx.req.discard_body() current("ngx.req.discard_body") end
function ngx.req.get_body_data()
    local r = current("ngx.req.get_body_data")
    local st = state(r)
    local body = st.body
    if body == nil then body = r.req.body end
    if body == "" then return nil end
    return body
end
function ngx.req.set_body_data(data)
    local r = current("ngx.req.set_body_data")
    if type(data) ~= "string" then error("ngx.req.set_body_data: a string expected", 2) end
    changed(r).body = data
end
-- Bodies stay in memory: there is never a file.
function ngx.req.get_body_file() current("ngx.req.get_body_file") return nil end

function ngx.req.get_post_args(max)
    current("ngx.req.get_post_args")
    local body = ngx.req.get_body_data() or ""
    return mf.uri.decode_args(body, max or 100)
end

function ngx.req.get_method() return var.method_of(current("ngx.req.get_method")) end

local METHOD_NAMES = { [2] = "GET", [4] = "HEAD", [8] = "POST", [16] = "PUT", [32] = "DELETE",
                       [64] = "MKCOL", [128] = "COPY", [256] = "MOVE", [512] = "OPTIONS",
                       [1024] = "PROPFIND", [2048] = "PROPPATCH", [4096] = "LOCK",
                       [8192] = "UNLOCK", [16384] = "PATCH", [32768] = "TRACE" }
function ngx.req.set_method(method)
    local r = current("ngx.req.set_method")
    local name = METHOD_NAMES[method]
    if not name then error("ngx.req.set_method: unsupported HTTP method: " .. tostring(method), 2) end
    changed(r).method = name
end

function ngx.req.http_version()
    return tonumber(current("ngx.req.http_version").req.version)
end

function ngx.req.raw_header(no_request_line)
    local r = current("ngx.req.raw_header")
    local req = r.req
    local raw = req.raw_header
    if not raw then -- a subrequest's: made from its fields
        local lines = { req.method .. " " .. req.uri .. " HTTP/" .. req.version .. "\r\n" }
        for k, v in pairs(req.headers) do
            if type(v) == "table" then v = concat(v, ", ") end
            lines[#lines + 1] = k .. ": " .. v .. "\r\n"
        end
        raw = concat(lines) .. "\r\n"
    end
    if no_request_line then raw = raw:gsub("^[^\n]*\n", "", 1) end
    return raw
end

function ngx.req.start_time()
    local r = current("ngx.req.start_time")
    local st = state(r)
    local t = r.req.start_time or st.start_time
    if not t then
        t = ngx.now()
        st.start_time = t
    end
    return t
end

function ngx.req.is_internal() return current("ngx.req.is_internal").req.subrequest ~= nil end

-- What only nginx has: a clear error naming the API.
local function not_here(what, why)
    return function() error(what .. ": " .. why, 2) end
end
ngx.req.set_body_file = not_here("ngx.req.set_body_file", "request bodies are never files here")
ngx.req.init_body = not_here("ngx.req.init_body", "not supported outside nginx (use ngx.req.set_body_data)")
ngx.req.append_body = not_here("ngx.req.append_body", "not supported outside nginx (use ngx.req.set_body_data)")
ngx.req.finish_body = not_here("ngx.req.finish_body", "not supported outside nginx (use ngx.req.set_body_data)")
ngx.exec = not_here("ngx.exec", "internal redirects are not supported outside nginx " ..
                    "(ngx.location.capture runs another route)")

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
local function in_request(what)
    if not request.find() then
        error(what .. ": only inside a moonflow serve handler (subrequests run another " ..
              "route of the site)", 3)
    end
end
ngx.location = {
    capture = function(uri, o)
        in_request("ngx.location.capture")
        return capture_res(mf.capture(uri, capture_opts(o)))
    end,
    capture_multi = function(list)
        in_request("ngx.location.capture_multi")
        local reqs = {}
        for i, one in ipairs(list) do reqs[i] = { one[1], capture_opts(one[2]) } end
        local res = mf.capture_multi(reqs)
        for i = 1, #res do res[i] = capture_res(res[i]) end
        return unpack(res, 1, #reqs)
    end,
}

-- the downstream socket
-- ngx.req.socket([raw]) is req:socket([raw]) of the handler's request: the
-- body as a stream, or with raw the connection once the response head is
-- out (req:socket(true) sends ngx.status and ngx.header first, which is
-- how Debian's nginx.websocket.server answers its 101).
function ngx.req.socket(raw)
    return current("ngx.req.socket").req:socket(raw)
end

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
