-- moonflow.ngx.request — which request an ngx.* call is about, and the
-- per-request state of moonflow.ngx (what ngx.req.set_uri_args,
-- ngx.req.set_header, ngx.say ... changed or did).
--
-- Under `moonflow serve` the running handler's req and resp are found
-- without any wrapper: the server keeps them with the handler's coroutine
-- thread (moonflow.serve's current(), given by the server), a subrequest's
-- (mf.capture) with its own. ngx.handler(fn) binds them explicitly, which
-- also works where the server is not (a test calling a handler).
local running = coroutine.running
local setmetatable, error = setmetatable, error

local serve = require "moonflow.serve"

local M = {}

-- Explicit bindings (ngx.handler): thread → { req =, resp = }.
local bound = setmetatable({}, { __mode = "k" })
M.bound = bound

-- The server's req and resp objects are the same for a thread's whole
-- life (made once per coroutine thread); whether they belong to the
-- running request they check themselves at every access. So they are
-- remembered per thread: a table lookup instead of a C call.
local kept = setmetatable({}, { __mode = "k" })

-- Once the answer is out (ngx.eof, ngx.redirect) the server's req
-- refuses every read, while the handler may go on: the record then has
-- r.after, a copy of the request made just before (see M.answered), used
-- while the answer is sent; the thread's next request, whose answer is
-- not sent yet, drops it.
local function after_answer(r)
    local after = r.after
    if not after then return r end
    if r.resp.sent then return after end
    r.after = nil
    return r
end

-- The record { req =, resp = } of the request running here, or nil.
local function find()
    local co = running()
    local r = bound[co]
    if r then return after_answer(r) end
    local subs = serve.subrequests
    local sub = subs and subs[co]
    if not sub then
        r = kept[co]
        if r then return after_answer(r) end
    end
    local current = serve.current
    if not current then return nil end
    local thread, req, resp = current()
    if not req then return nil end
    r = { req = req, resp = resp }
    if thread == co and not sub then kept[co] = r end
    return r
end
M.find = find

-- The record, or a raise naming the API called outside a request.
function M.current(what)
    local r = find()
    if not r then
        error(what .. ": no request here (only in a moonflow serve handler, or in " ..
              "one wrapped with ngx.handler)", 3)
    end
    return r
end

-- The state of moonflow.ngx for r's request, made on first use: a weak
-- table keyed by the request's req.ctx, which is the request's own.
local states = setmetatable({}, { __mode = "k" })
M.changed = false -- whether any request ever changed what ngx.var reads

function M.state(r)
    local key = r.req.ctx or r.req -- a plain table given to ngx.handler's fn
    local st = states[key]
    if not st then
        st = {}
        states[key] = st
    end
    return st
end

-- The request's fields and its answer's status and headers, copied for
-- the rest of the handler once the answer is out (its ctx, hence its
-- state, is the same table).
local FIELDS = { "method", "path", "uri", "version", "peer", "headers", "cookies", "query",
                 "body", "id", "raw_header", "start_time", "server_addr", "scheme", "ctx",
                 "subrequest" }

-- Called just before the answer goes out, with the status it goes out
-- with.
function M.answered(r, status)
    if r.after then return end
    local req, copy = r.req, {}
    for i = 1, #FIELDS do copy[FIELDS[i]] = req[FIELDS[i]] end
    local resp = r.resp
    r.after = { req = copy, resp = { status = status or resp.status, headers = resp.headers,
                                     sent = true } }
end

-- The state when one may exist (ngx.var's fast path: no lookup before
-- the first change anywhere).
function M.changes(r)
    if not M.changed then return nil end
    return states[r.req.ctx or r.req]
end

return M
