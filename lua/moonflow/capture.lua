-- moonflow.capture — the Lua side of `moonflow serve`'s subrequests
-- (lua/serve/capture.c): mf.capture(uri [, opts]) runs another route of the
-- site in this worker, in-process, and returns {status, headers, body};
-- mf.capture_multi{{uri, opts}, ...} runs several side by side.
--
-- A subrequest is the route's handler run as a flow step (mf.task.lua: a
-- coroutine of its own; mf.capture_multi's side by side in one parallel)
-- with a req and a resp of its own, plain tables with the
-- methods handlers use (req:header, req:form, resp:send, resp:json,
-- resp:write, resp:redirect, resp:set_header, resp:set_cookie). Its answer
-- stays in memory: nothing is sent, so resp:write collects the body. What
-- the subrequest inherits from its parent (as nginx's do): the request
-- headers (opts.headers replace or, false, remove some), the peer, and for
-- POST and PUT without opts.body the parent's body. Its own: the method
-- (opts.method, default GET), path and query (the uri's, then opts.args),
-- a fresh req.ctx, and req.subrequest, its depth (1 under a handler).
-- Of a route with phases, the subrequest runs the content, then its
-- header_filter and body_filter on the answer (as nginx's output filters
-- run on subrequests), never rewrite, access or log; ngx.get_phase() says
-- "content", "header_filter" or "body_filter" there.
--
-- Failures are answers, never the caller's errors: a route with no script
-- 404, a handler that raised or a script that never loaded 500 (the error
-- logged with its traceback), a handler past its route's timeout (or the
-- server's handler timeout, or opts.timeout) 504 — it is aborted then, as
-- are the subrequests of a handler that ends first (its client gone, its
-- own timeout). Misuse raises: a uri that is not a path, a bad option, a call
-- outside a handler, nesting deeper than MAX_DEPTH.
local mf = require "moonflow"
local serve = require "moonflow.serve"
local cookie_parse = require("moonflow.cookie").parse
local raise = require "moonflow.raise"

local type, pairs, next, tostring, setmetatable, pcall =
    type, pairs, next, tostring, setmetatable, pcall
local lower, concat, find, sub = string.lower, table.concat, string.find, string.sub

-- nginx stops subrequests 50 levels deep; so do we.
local MAX_DEPTH = 50

local STATUS_TEXT = {
    [404] = "404 Not Found\n",
    [500] = "500 Internal Server Error\n",
    [504] = "504 Gateway Timeout\n",
}
local TEXT_TYPE = "text/plain; charset=utf-8"

local function headers_table(t) return setmetatable(t, serve.headers_mt) end

-- lua/serve/capture.c's functions (route, current, form), given at install.
local cfuncs

-- ---- the subrequest's req ---------------------------------------------------

local Request = {}
Request.__index = Request

function Request:header(name) return self.headers[name] end

function Request:form(max)
    return cfuncs.form(self.headers["content-type"], self.body, max)
end

-- The request headers: the parent's (lowercase keys), then opts.headers.
local function inherit_headers(parent, extra)
    local h = {}
    for k, v in pairs(parent.headers) do h[k] = v end
    if extra ~= nil then
        if type(extra) ~= "table" then raise("mf.capture: headers must be a table") end
        for k, v in pairs(extra) do
            if type(k) ~= "string" then raise("mf.capture: header names are strings") end
            if v == false then v = nil end
            h[lower(k)] = v
        end
    end
    return h
end

local function query_of(uri_query, args)
    if args == nil then return uri_query end
    if type(args) == "table" then args = mf.uri.encode_args(args) end
    if type(args) ~= "string" then raise("mf.capture: args must be a string or a table") end
    if uri_query == "" then return args end
    if args == "" then return uri_query end
    return uri_query .. "&" .. args
end

local KNOWN = { method = true, body = true, args = true, headers = true, timeout = true }

local function check_opts(opts)
    if opts == nil then return {} end
    if type(opts) ~= "table" then raise("mf.capture: options must be a table") end
    for k in pairs(opts) do
        if not KNOWN[k] then raise("mf.capture: unknown option '" .. tostring(k) .. "'") end
    end
    if opts.method ~= nil and (type(opts.method) ~= "string" or not find(opts.method, "^%u+$")) then
        raise("mf.capture: method must be an uppercase name such as \"POST\"")
    end
    if opts.body ~= nil and type(opts.body) ~= "string" then
        raise("mf.capture: body must be a string")
    end
    if opts.timeout ~= nil and (type(opts.timeout) ~= "number" or opts.timeout < 0) then
        raise("mf.capture: timeout must be a number of ms >= 0")
    end
    return opts
end

local function new_request(parent, uri, opts, depth)
    if type(uri) ~= "string" or sub(uri, 1, 1) ~= "/" then
        raise("mf.capture: a path such as \"/route?args\" expected")
    end
    local q = find(uri, "?", 1, true)
    local path = q and sub(uri, 1, q - 1) or uri
    local query = query_of(q and sub(uri, q + 1) or "", opts.args)
    local method = opts.method or "GET"
    local body = opts.body
    if body == nil and (method == "POST" or method == "PUT") then body = parent.body end
    body = body or ""
    local headers = inherit_headers(parent, opts.headers)
    headers["content-length"] = #body > 0 and tostring(#body) or nil
    local cookies = headers.cookie
    if type(cookies) == "table" then cookies = concat(cookies, "; ") end
    return setmetatable({
        method = method, path = path, version = "1.1",
        uri = query ~= "" and path .. "?" .. query or path,
        query = mf.uri.decode_args(query),
        headers = headers_table(headers), body = body, peer = parent.peer,
        cookies = cookies and cookie_parse(cookies) or {},
        ctx = {}, subrequest = depth,
    }, Request)
end

-- ---- the subrequest's resp --------------------------------------------------

local Response = {}
Response.__index = Response

local function check_unsent(resp, what)
    if resp.sent then raise(what .. ": the answer was already sent") end
end

local function check_status(status)
    if type(status) ~= "number" or status < 100 or status > 999 or status % 1 ~= 0 then
        raise("a status from 100 to 999 expected")
    end
    return status
end

function Response:set_header(name, value)
    check_unsent(self, "resp:set_header")
    if type(name) ~= "string" or not find(name, "^[%w!#$%%&'*+%-.^_`|~]+$") then
        raise("resp:set_header: a header name (a token) expected")
    end
    local vt = type(value)
    if vt ~= "nil" and vt ~= "string" and vt ~= "number" and vt ~= "table" then
        raise("resp:set_header: a string, number or list value expected")
    end
    self.headers[name] = value
end

function Response:send(body)
    check_unsent(self, "resp:send")
    self.chunks[#self.chunks + 1] = body ~= nil and tostring(body) or ""
    self.sent = true -- the last piece ends the body (its eof)
end

function Response:write(chunk)
    check_unsent(self, "resp:write")
    self.chunks[#self.chunks + 1] = tostring(chunk)
    return true
end

function Response:json(value, status)
    check_unsent(self, "resp:json")
    if status ~= nil then self.status = check_status(status) end
    self.json_type = true
    self:send(mf.json.encode(value))
end

function Response:redirect(url, status)
    if type(url) ~= "string" then raise("resp:redirect(url [, status]): url expected") end
    check_unsent(self, "resp:redirect") -- before anything of the answer changes
    self.status = check_status(status or 302)
    self.headers.Location = url
    self:send()
end

Response.set_cookie = serve.response.set_cookie

local function new_response()
    return setmetatable({ status = 200, headers = {}, chunks = {}, sent = false }, Response)
end

-- The answer as the caller gets it: header names lowercased (any spelling
-- finds them), a Content-Type as the server would give it.
local function answer_of(resp)
    local h = {}
    for k, v in pairs(resp.headers) do
        if type(k) == "string" then
            if type(v) == "number" then v = tostring(v) end
            h[lower(k)] = v
        end
    end
    if h["content-type"] == nil then
        h["content-type"] = resp.json_type and "application/json" or TEXT_TYPE
    end
    return { status = resp.status, headers = headers_table(h), body = concat(resp.chunks) }
end

local function plain_answer(status)
    return { status = status, headers = headers_table({ ["content-type"] = TEXT_TYPE }),
             body = STATUS_TEXT[status] }
end

-- ---- running ----------------------------------------------------------------

return function(c)
    cfuncs = c
    -- A subrequest's coroutine → its req (the parent of its own captures),
    -- while its handler runs: the thread may serve a request next.
    local running = setmetatable({}, { __mode = "k" })
    -- A subrequest's coroutine → its phase (moonflow.serve's sub_phase).
    local phase_of = setmetatable({}, { __mode = "k" })

    -- The caller's req and the depth of the subrequests it makes.
    local function parent_of()
        local co, req = c.current()
        local sub_req = co and running[co]
        if sub_req then return sub_req, sub_req.subrequest + 1 end
        if req and pcall(function() return req.method end) then return req, 1 end
        raise("mf.capture: only inside a moonflow serve handler")
    end

    local answering = setmetatable({}, { __mode = "k" }) -- and its resp

    -- The route's filters on the answer the content made: the header
    -- filter once, then the body filter on each piece (each resp:write;
    -- resp:send's last, with eof; or "" with eof after a stream), as the
    -- server runs them on a request's answer.
    local function filter(me, phases, req, resp)
        if phases.header_filter then
            phase_of[me] = "header_filter"
            phases.header_filter(req, resp)
        end
        local body_filter = phases.body_filter
        if not body_filter then return end
        phase_of[me] = "body_filter"
        local chunks = resp.chunks
        if not resp.sent then chunks[#chunks + 1] = "" end
        for i = 1, #chunks do
            local piece = body_filter(req, resp, chunks[i], i == #chunks)
            if piece == nil then piece = chunks[i] end
            if type(piece) ~= "string" then
                raise("body_filter: a string expected back (or nil: the piece as it was), got "
                      .. type(piece))
            end
            chunks[i] = piece
        end
    end

    local function run(handler, req, resp, phases)
        local co = c.current()
        running[co], answering[co] = req, resp
        phase_of[co] = "content"
        handler(req, resp)
        if phases then filter(co, phases, req, resp) end
    end

    local function forget(_, thread)
        running[thread], answering[thread], phase_of[thread] = nil, nil, nil
    end

    -- The phase and the req of the subrequest running here, or nil.
    serve.sub_phase = function()
        if next(phase_of) == nil then return nil end -- no subrequest runs
        local co = c.current()
        return co and phase_of[co]
    end
    serve.sub_request = function()
        if next(running) == nil then return nil end
        local co = c.current()
        return co and running[co]
    end

    -- For moonflow.ngx: the running coroutine's thread, and the req and
    -- resp of the subrequest or the handler it runs (none outside one).
    serve.subrequests = running
    function serve.current()
        local co, req, resp = c.current()
        local sub = co and running[co]
        if sub then return co, sub, answering[co] end
        return co, req, resp
    end

    -- The subrequest for uri: its answer at once (no such route), or the
    -- step that runs its handler (a lua task: a timeout or the parent's
    -- end aborts it) and the resp it answers into.
    local function prepare(parent, depth, uri, opts)
        opts = check_opts(opts)
        if depth > MAX_DEPTH then
            raise(("mf.capture: subrequests nested deeper than %d (%s)"):format(MAX_DEPTH, uri))
        end
        local req = new_request(parent, uri, opts, depth)
        local handler, timeout, phases = c.route(req.path)
        if not handler then return { answer = plain_answer(timeout) } end
        timeout = opts.timeout or timeout
        local resp = new_response()
        local step = mf.task.lua { fn = run, args = { handler, req, resp, phases }, finally = forget,
                                   timeout = timeout > 0 and timeout or nil }
        return { step = step, resp = resp, uri = uri }
    end

    -- The answer of a prepared subrequest whose step ended with result r.
    local function answer(s, r)
        if s.answer then return s.answer end
        if r.state == "success" then return answer_of(s.resp) end
        mf.log("error", "capture ", s.uri, ": ", r.error)
        return plain_answer(r.state == "timeout" and 504 or 500)
    end

    mf.capture = function(uri, opts)
        local parent, depth = parent_of()
        local s = prepare(parent, depth, uri, opts)
        return answer(s, s.step and s.step:wait())
    end

    -- The steps side by side in one parallel: one wait for all of them.
    mf.capture_multi = function(list)
        if type(list) ~= "table" then raise("mf.capture_multi: a list of {uri, opts} expected") end
        local parent, depth = parent_of()
        local prepared, steps, at = {}, {}, {}
        for i = 1, #list do
            local one = list[i]
            if type(one) == "string" then one = { one } end
            if type(one) ~= "table" then
                raise(("mf.capture_multi: entry %d: {uri [, opts]} expected"):format(i))
            end
            prepared[i] = prepare(parent, depth, one[1], one[2])
            if prepared[i].step then
                steps[#steps + 1] = prepared[i].step
                at[i] = #steps
            end
        end
        local results = #steps > 0 and mf.parallel(steps):wait() or {}
        local answers = {}
        for i = 1, #prepared do answers[i] = answer(prepared[i], results[at[i]]) end
        return answers
    end
end
