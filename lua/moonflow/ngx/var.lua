-- moonflow.ngx.var — ngx.var: nginx's variables of the running request,
-- read from moonflow's req and resp (strings, as nginx gives them; nil
-- for one the request has not). Writable: args (as
-- ngx.req.set_uri_args), and any name that is no built-in variable (a
-- variable of the request's own: nginx's `set $name`, which a moonflow
-- site has no config for). Writing a built-in one raises, as nginx does.
local request = require "moonflow.ngx.request"

local find, sub, lower, gsub, byte, char = string.find, string.sub, string.lower,
    string.gsub, string.byte, string.char
local concat, tostring, tonumber, type, error = table.concat, tostring, tonumber, type, error
local floor, date = math.floor, os.date

local current, changes = request.current, request.changes
local ngx -- the table installed into (below)

-- ---- the request line -------------------------------------------------------

local function args_of(r)
    local st = changes(r)
    if st and st.args ~= nil then return st.args end
    local uri = r.req.uri
    local q = find(uri, "?", 1, true)
    return q and sub(uri, q + 1) or nil
end

-- $uri: the path. nginx decodes and normalizes it; serve matches routes
-- on the path as sent, so a path that reaches a handler has no escape
-- or dot segment to undo, save in a file name that holds one.
local function uri_of(r)
    local st = changes(r)
    if st and st.uri then return st.uri end
    return r.req.path
end

local function method_of(r)
    local st = changes(r)
    return st and st.method or r.req.method
end

-- ---- the peers --------------------------------------------------------------

-- "ip:port" or "[ip6]:port" split, remembered: a worker sees the same
-- peers again and again (kept-alive connections), and this is the cost of
-- $remote_addr. At most 1,000 remembered at a time.
local split_cache, split_count = {}, 0

local function split_addr(addr)
    if not addr then return nil end
    local known = split_cache[addr]
    if known then return known[1], known[2] end
    local host, port = addr:match("^%[(.*)%]:(%d+)$")
    if not host then host, port = addr:match("^(.*):(%d+)$") end
    if split_count >= 1000 then split_cache, split_count = {}, 0 end
    split_cache[addr], split_count = { host, port }, split_count + 1
    return host, port
end

-- 16 bytes of an IPv6 address in text (RFC 4291 §2.2, a dotted IPv4 tail
-- included), or nil.
local function ipv6_bytes(s)
    local head, tail = s:match("^(.-)::(.*)$")
    local function words(part, out)
        if part == "" then return out end
        for w in (part .. ":"):gmatch("([^:]*):") do
            if w:find("%.") then
                local a, b, c, d = w:match("^(%d+)%.(%d+)%.(%d+)%.(%d+)$")
                if not a then return nil end
                out[#out + 1] = tonumber(a) * 256 + tonumber(b)
                out[#out + 1] = tonumber(c) * 256 + tonumber(d)
            else
                local v = tonumber(w, 16)
                if not v or #w > 4 then return nil end
                out[#out + 1] = v
            end
        end
        return out
    end
    local w
    if head then
        local a, b = words(head, {}), words(tail, {})
        if not a or not b or #a + #b > 7 then return nil end
        w = a
        for _ = 1, 8 - #a - #b do w[#w + 1] = 0 end
        for i = 1, #b do w[#w + 1] = b[i] end
    else
        w = words(s, {})
        if not w or #w ~= 8 then return nil end
    end
    local bytes = {}
    for i = 1, 8 do
        bytes[2 * i - 1] = char(floor(w[i] / 256))
        bytes[2 * i] = char(w[i] % 256)
    end
    return concat(bytes)
end

local function binary_addr(host)
    if not host then return nil end
    local a, b, c, d = host:match("^(%d+)%.(%d+)%.(%d+)%.(%d+)$")
    if a then return char(tonumber(a), tonumber(b), tonumber(c), tonumber(d)) end
    return ipv6_bytes(host)
end

local hostname
local function get_hostname()
    if not hostname then
        local f = io.open("/proc/sys/kernel/hostname")
        hostname = f and f:read("*l") or os.getenv("HOSTNAME") or "localhost"
        if f then f:close() end
    end
    return hostname
end

-- ---- headers ----------------------------------------------------------------

-- A request header as nginx's $http_NAME gives it: repeated fields joined
-- (cookies with "; ", others with ", ").
local function header_value(headers, name)
    local v = headers[name]
    if type(v) == "table" then return concat(v, name == "cookie" and "; " or ", ") end
    return v
end

-- $arg_NAME: the raw (still escaped) value of the first NAME=... of the
-- query, the name in any case; nil for a key without "=" (nginx's). The
-- search is a Lua pattern matching NAME= in any case ("[aA]="), made once
-- per name (at most 1,000 kept).
local arg_patterns, arg_count = {}, 0

local function arg_pattern(name)
    local pat = arg_patterns[name]
    if pat then return pat end
    pat = name:gsub("%W", "%%%0")
              :gsub("%a", function(c) return "[" .. c:lower() .. c:upper() .. "]" end) .. "="
    if arg_count >= 1000 then arg_patterns, arg_count = {}, 0 end
    arg_patterns[name], arg_count = pat, arg_count + 1
    return pat
end

local function arg_value(args, name)
    if not args then return nil end
    local pat, at = arg_pattern(name), 1
    while true do
        local from, to = find(args, pat, at)
        if not from then return nil end
        if from == 1 or byte(args, from - 1) == 38 then -- '&'
            local amp = find(args, "&", to + 1, true)
            return sub(args, to + 1, (amp or #args + 1) - 1)
        end
        at = from + 1
    end
end

-- ---- the table --------------------------------------------------------------

local function time_iso8601()
    local z = date("%z")
    return date("%Y-%m-%dT%H:%M:%S") .. sub(z, 1, 3) .. ":" .. sub(z, 4, 5)
end

local function body_bytes(r)
    local st = changes(r) or request.state(r)
    return tostring(st.bytes or 0)
end

-- name → function(r) → the value (a string) or nil
local vars = {
    uri = uri_of,
    document_uri = uri_of,
    request_uri = function(r) return r.req.uri end,
    args = args_of,
    query_string = args_of,
    is_args = function(r) return args_of(r) and "?" or "" end,
    request_method = method_of,
    request = function(r)
        return method_of(r) .. " " .. r.req.uri .. " HTTP/" .. r.req.version
    end,
    server_protocol = function(r) return "HTTP/" .. r.req.version end,
    scheme = function(r) return r.req.scheme or "http" end,
    https = function(r) return r.req.scheme == "https" and "on" or "" end,
    remote_addr = function(r) return (split_addr(r.req.peer)) end,
    remote_port = function(r)
        local _, port = split_addr(r.req.peer)
        return port
    end,
    binary_remote_addr = function(r) return binary_addr((split_addr(r.req.peer))) end,
    server_addr = function(r) return (split_addr(r.req.server_addr)) end,
    server_port = function(r)
        local _, port = split_addr(r.req.server_addr)
        return port
    end,
    host = function(r)
        local h = r.req.headers.host
        if type(h) == "table" then h = h[1] end
        if h and h ~= "" then
            return lower(h:match("^%[[^%]]*%]") or h:match("^[^:]*"))
        end
        return ""
    end,
    hostname = get_hostname,
    content_type = function(r) return header_value(r.req.headers, "content-type") end,
    content_length = function(r) return header_value(r.req.headers, "content-length") end,
    request_body = function(r)
        local st = changes(r)
        local body = st and st.body or r.req.body
        if body == "" then return nil end
        return body
    end,
    request_length = function(r)
        local raw = r.req.raw_header
        return tostring((raw and #raw or 0) + #(r.req.body or ""))
    end,
    request_time = function(r)
        local start = r.req.start_time
        if not start then return "0.000" end
        local t = ngx.now() - start
        return ("%.3f"):format(t > 0 and t or 0)
    end,
    request_id = function(r) return r.req.id end,
    status = function(r) return tostring(r.resp.status) end,
    body_bytes_sent = body_bytes,
    bytes_sent = body_bytes,
    msec = function() return ("%.3f"):format(ngx.now()) end,
    time_local = function() return date("%d/%b/%Y:%H:%M:%S %z") end,
    time_iso8601 = time_iso8601,
    pid = function() return tostring(ngx.worker.pid()) end,
    nginx_version = function()
        local v = ngx.config.nginx_version
        return ("%d.%d.%d"):format(floor(v / 1000000), floor(v / 1000) % 1000, v % 1000)
    end,
}

-- The families: http_NAME (request headers), sent_http_NAME (response
-- headers), cookie_NAME, arg_NAME.
local function family(r, name)
    local rest = name:match("^http_(.+)$")
    if rest then return header_value(r.req.headers, lower(gsub(rest, "_", "-"))) end
    rest = name:match("^cookie_(.+)$")
    if rest then return r.req.cookies[rest] end
    rest = name:match("^arg_(.+)$")
    if rest then return arg_value(args_of(r), rest) end
    rest = name:match("^sent_http_(.+)$")
    if rest then
        local v = ngx.resp.get_headers()[rest]
        if type(v) == "table" then v = concat(v, ", ") end
        return v
    end
    return false
end

return function(into)
    ngx = into
    ngx.var = setmetatable({}, {
        __index = function(_, name)
            local r = current("ngx.var")
            local f = vars[name]
            if f then return f(r) end
            if type(name) ~= "string" then return nil end
            local v = family(r, name)
            if v ~= false then return v end
            local st = changes(r)
            return st and st.vars and st.vars[name]
        end,
        __newindex = function(_, name, value)
            local r = current("ngx.var")
            if value ~= nil and type(value) ~= "string" and type(value) ~= "number" then
                error("ngx.var." .. tostring(name) .. ": a string or a number expected", 2)
            end
            if name == "args" then
                return ngx.req.set_uri_args(value or "")
            end
            if vars[name] or (type(name) == "string" and family(r, name) ~= false) then
                error(("ngx.var.%s: variable \"%s\" not changeable"):format(name, name), 2)
            end
            request.changed = true
            local st = request.state(r)
            st.vars = st.vars or {}
            st.vars[name] = value ~= nil and tostring(value) or nil
        end,
    })
    return { args_of = args_of, method_of = method_of }
end
