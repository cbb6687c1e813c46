-- moonflow.serve — the Lua side of `moonflow serve`'s response object and
-- the case-insensitive request header table. The C side (lua/serve/handler.c)
-- merges `response` (the methods written in Lua) into resp's methods.
local type, rawget, lower = type, rawget, string.lower
local cookie_line = require("moonflow.cookie").set_line

local M = { response = {} }

-- req.headers: keys are stored lowercase; any spelling finds them.
M.headers_mt = {
    __index = function(t, k)
        if type(k) == "string" then
            local l = lower(k)
            if l ~= k then return rawget(t, l) end
        end
    end,
}

-- resp:set_cookie(name, value [, opts]): one more Set-Cookie header
-- (moonflow.cookie checks and writes it; misuse raises, naming
-- resp:set_cookie).
function M.response.set_cookie(resp, name, value, opts)
    local line = cookie_line(resp, name, value, opts)
    local headers = resp.headers
    local now = headers["Set-Cookie"]
    if now == nil then
        headers["Set-Cookie"] = line
    elseif type(now) == "table" then
        now[#now + 1] = line
    else
        headers["Set-Cookie"] = { now, line }
    end
end

-- resp:send: a string body goes through the FFI to the C side's plain
-- case (mf_serve_resp_send_ffi: the running handler's own resp, nothing
-- set in resp.headers, no phases), which a compiled handler calls from its
-- trace; everything else, and a program without that symbol, goes to the
-- C method send (a tail call: its errors name the handler's line).
function M.fast_send(send)
    local ok, ffi = pcall(require, "ffi")
    local jit_ok, jit = pcall(require, "jit")
    -- interpreted, an FFI call costs more than the C method's: with the
    -- compiler off (serve's jit = false) send stays the C method
    if not ok or not jit_ok or not jit.status() or not pcall(ffi.cdef, [[
        int mf_serve_resp_send_ffi(const void *obj, const char *body,
                                   size_t len);]]) then
        return send
    end
    local found, plain = pcall(function() return ffi.C.mf_serve_resp_send_ffi end)
    if not found then return send end
    return function(resp, body)
        if type(body) == "string" and type(resp) == "userdata" and
            plain(resp, body, #body) == 0 then
            return
        end
        return send(resp, body)
    end
end

-- resp's __index: the methods (a table hit, no C call for resp:send),
-- then the C-side properties (status, headers, sent).
function M.index(methods, property)
    return function(resp, key)
        local m = methods[key]
        if m ~= nil then return m end
        return property(resp, key)
    end
end

-- ---- phases --------------------------------------------------------------
-- A route may return a table of phases instead of a function (routes.c
-- checks its keys): rewrite, access, content, header_filter, body_filter,
-- log, on_abort. handler.c runs M.run(phases, req, resp) as the request's
-- coroutine, calls M.header_filter / M.body_filter before the head and on
-- every piece of the body, and M.run_log in a coroutine of its own once
-- the answer is over. The C side (install) gives: phase(), request(),
-- enter(n), finish(), stop(), end(), on_abort(fn), reason(status).

local xpcall, error, traceback = xpcall, error, debug.traceback
local tostring, floor = tostring, math.floor

-- handler.c's phase numbers (mf_serve_phase_t).
local CONTENT, REWRITE, ACCESS, HEADER_FILTER, BODY_FILTER = 0, 1, 2, 3, 4
local OK, ERROR = 0, -1

local c -- the C side, set by install

-- ngx.exit's unwinding: raised, caught by the phase that runs.
local EXIT = setmetatable({}, { __tostring = function() return "ngx.exit" end })
local exit_code

local function catch(err)
    if err == EXIT then return EXIT end
    if type(err) == "string" then return traceback(err, 2) end
    return err
end

-- Runs one phase; false when it ended with ngx.exit (exit_code says how).
local function run_phase(n, fn, ...)
    local was = c.enter(n)
    exit_code = nil
    local ok, err = xpcall(fn, catch, ...)
    c.enter(was)
    if not ok and err ~= EXIT then error(err, 0) end
    return ok
end

-- ngx.exit(status) with an HTTP status: that answer, unless one went out.
local function answer(resp, code)
    if resp.headers_sent then return end
    resp.status = code
    resp:send(code >= 300 and c.reason(code) or "")
end

-- What ngx.exit asked of the rewrite, access or content phase: true when
-- the request goes on to its next phase.
local function after_exit(resp, code, phase)
    if code == OK then return phase ~= CONTENT end
    if code == ERROR then error("ngx.exit(ngx.ERROR): the request is aborted", 0) end
    if code >= 100 then answer(resp, code) end
    return false
end

-- Rewrite or access: true when the request goes on (the phase neither
-- answered nor ended it with ngx.exit).
local function before_content(n, fn, req, resp)
    if not fn then return true end
    if not run_phase(n, fn, req, resp) and not after_exit(resp, exit_code, n) then
        return false
    end
    return not (resp.sent or resp.headers_sent)
end

function M.run(phases, req, resp)
    if before_content(REWRITE, phases.rewrite, req, resp) and
        before_content(ACCESS, phases.access, req, resp) and
        not run_phase(CONTENT, phases.content, req, resp) then
        after_exit(resp, exit_code, CONTENT)
    end
    c.finish()
end

function M.header_filter(phases, req, resp)
    local fn = phases.header_filter
    if fn then run_phase(HEADER_FILTER, fn, req, resp) end
end

local function check_piece(piece)
    if type(piece) ~= "string" then
        error("body_filter: a string expected back (or nil: the piece as it "
              .. "was), got " .. type(piece), 0)
    end
    return piece
end

local filtered
local function body_filter(fn, req, resp, chunk, eof)
    filtered = fn(req, resp, chunk, eof)
    if filtered == nil then filtered = chunk end
end

function M.body_filter(phases, req, resp, chunk, eof)
    local fn = phases.body_filter
    if not fn then return chunk end
    filtered = chunk
    run_phase(BODY_FILTER, body_filter, fn, req, resp, chunk, eof)
    local piece = filtered
    filtered = nil
    return check_piece(piece)
end

-- The log phase's coroutine: an ngx.exit there only ends it.
function M.run_log(phases, req, resp)
    local ok, err = xpcall(phases.log, catch, req, resp)
    if not ok and err ~= EXIT then error(err, 0) end
end

-- The running request's phase: rewrite, access, content, header_filter,
-- body_filter, log; init, init_worker or timer for code that serves no
-- request (outside moonflow serve: nil).
function M.phase()
    local sub = M.sub_phase -- a subrequest's (moonflow.capture)
    return sub and sub() or c and c.phase() or nil
end

-- ngx.exit(code) with OpenResty's meaning: ngx.OK ends the phase (the
-- request goes on to the next one), an HTTP status answers with it (unless
-- the head went out) and ends the request's handler, ngx.ERROR aborts it.
function M.exit(code)
    if type(code) ~= "number" or floor(code) ~= code then
        error("ngx.exit: an integer status expected, got " .. tostring(code), 2)
    end
    local req, resp, phase, phased, thread = nil, nil, nil, nil, nil
    if c then req, resp, phase, phased, thread = c.request() end
    if not req or thread then -- a timer, init, a thread: it ends there
        if not c then error("ngx.exit: outside moonflow serve", 2) end
        -- a request's thread answers with an HTTP status first
        if thread and code >= 100 then answer(resp, code) end
        return c["end"]()
    end
    exit_code = code
    if phased or phase ~= "content" then error(EXIT, 0) end
    -- a plain handler: its answer, then its end (as if it had returned)
    if code == ERROR then error("ngx.exit(ngx.ERROR): the request is aborted", 2) end
    if code >= 100 then answer(resp, code) end
    return c.stop()
end

-- The running request's req.ctx (ngx.ctx): one table for all its phases;
-- a subrequest's is its own.
function M.ctx()
    local sub = M.sub_request -- a subrequest's own (moonflow.capture)
    local req = sub and sub() or c and c.request()
    if not req then error("ngx.ctx: no request here", 2) end
    return req.ctx
end

-- on_abort(fn): fn runs in a coroutine of its own when the client of the
-- running request leaves (its handler goes on).
function M.on_abort(fn)
    if not c then error("on_abort: no request here", 2) end
    return c.on_abort(fn)
end

-- at_end(fn): fn runs once the running request is over, however it ended
-- (answered, raised, timed out, its client gone, the server stopping),
-- after its handler, log phase and threads; it cannot wait. true, or false
-- where no request runs (a timer, init, outside moonflow serve).
function M.at_end(fn)
    if type(fn) ~= "function" then
        error("at_end(fn): a function expected, got " .. type(fn), 2)
    end
    if not (c and c.request()) then return false end
    c.at_end(fn)
    return true
end

-- _peer_key(): the running request's client address as raw bytes (4 or
-- 16), for moonflow.limit's "remote_addr" key.
function M._peer_key() return c.peer_key() end
-- _peer_key_fn(): the C function itself, once installed (one call less a
-- request for a route's limit).
function M._peer_key_fn() return c and c.peer_key or M._peer_key end
-- _limit_peer(name): for a route's local limit.req on the client's
-- address, limit_peer and the dict: limit_peer(d, rate, burst, prefix) ->
-- excess | nil, "rejected" in one C call; nil outside serve's workers.
function M._limit_peer(name)
    local d = c and c.dict_ptr(name)
    if d then return c.limit_peer, d end
end

function M.install(cside) c = cside end

return M
