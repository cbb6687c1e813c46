-- Request phases under `moonflow serve` (spec/lua/site, MF_SERVE_PORT): a
-- route that returns a table of phases (rewrite, access, content,
-- header_filter, body_filter, log), ngx.get_phase / ngx.exit / ngx.ctx /
-- ngx.on_abort, and handlers that outlive a client who left: the log phase
-- gives back a lock taken in access whatever the handler waited on.
local mf = require "moonflow"

local base = "http://127.0.0.1:" .. assert(os.getenv("MF_SERVE_PORT"))

local function get(path, opts)
    return mf.http.get(base .. path, opts)
end

local serial = 0
local function new_key(what)
    serial = serial + 1
    return ("%s-%d-%d"):format(what, mf.now(), serial)
end

-- What the site's phases left under key, once field is there (bounded).
local function state(key, field)
    local s
    for _ = 1, 300 do
        s = mf.json.decode(assert(get("/phase_state?key=" .. key)).body)
        if field == nil or s[field] ~= nil then return s end
        mf.sleep(10)
    end
    return s
end

local ALL = "rewrite=rewrite access=access content=content " ..
    "header_filter=header_filter body_filter=body_filter"

describe("request phases", function()
    it("run rewrite, access, content, the filters and log in order", function()
        local key = new_key("order")
        local r = assert(get("/phases?case=send&key=" .. key))
        assert.are.equal(200, r.status)
        assert.are.equal("yes", r.headers["x-filtered"])
        assert.are.equal("SENT|eof", r.body)
        assert.are.equal(ALL .. " log=log status=200", state(key, "order").order)
    end)

    it("filter the answers of resp:json, resp:write and resp:redirect", function()
        local r = assert(get("/phases?case=json&key=" .. new_key("json")))
        assert.are.equal('{"A":"B"}|eof', r.body)
        assert.are.equal("application/json", r.headers["content-type"])
        local key = new_key("write")
        r = assert(get("/phases?case=write&key=" .. key))
        assert.are.equal("ONE TWO|eof", r.body)
        assert.are.equal(ALL .. " body_filter=body_filter body_filter=body_filter " ..
            "log=log status=200", state(key, "order").order)
        r = assert(get("/phases?case=redirect&key=" .. new_key("redirect")))
        assert.are.equal(302, r.status)
        assert.are.equal("yes", r.headers["x-filtered"])
    end)

    it("let the header filter change the status", function()
        local r = assert(get("/phases?case=status&key=" .. new_key("status")))
        assert.are.equal(202, r.status)
    end)

    it("end the request when access answers with ngx.exit; content does not run", function()
        local key = new_key("deny")
        local r = assert(get("/phases?case=deny&key=" .. key))
        assert.are.equal(403, r.status)
        assert.are.equal("403 FORBIDDEN\n|eof", r.body)
        assert.are.equal("rewrite=rewrite access=access header_filter=header_filter " ..
            "body_filter=body_filter log=log status=403", state(key, "order").order)
    end)

    it("go on to content after ngx.exit(ngx.OK) in access", function()
        local key = new_key("ok")
        local r = assert(get("/phases?case=ok&key=" .. key))
        assert.are.equal("SENT|eof", r.body)
        assert.are.equal(ALL .. " log=log status=200", state(key, "order").order)
    end)

    it("answer ngx.exit(204) in content and end it", function()
        local key = new_key("exit204")
        local r = assert(get("/phases?case=exit204&key=" .. key))
        assert.are.equal(204, r.status)
        assert.matches("content=content header_filter=header_filter", state(key, "order").order)
    end)

    it("run the log phase after an error (500) and after ngx.ERROR", function()
        local key = new_key("raise")
        local r = assert(get("/phases?case=raise&key=" .. key))
        assert.are.equal(500, r.status)
        assert.are.equal("rewrite=rewrite access=access content=content log=log status=500",
            state(key, "order").order)
        key = new_key("error")
        r = assert(get("/phases?case=error&key=" .. key))
        assert.are.equal(500, r.status)
        assert.are.equal("rewrite=rewrite access=access log=log status=500",
            state(key, "order").order)
    end)

    it("say timer in a timer a handler started, which ngx.exit ends", function()
        local key = new_key("timer")
        assert(get("/phases?case=timer&key=" .. key))
        assert.are.equal("timer", state(key, "timer").timer)
        mf.sleep(50)
        assert.are.equal("timer", state(key).timer)
    end)

    it("give threads a handler spawns its request, its ngx.ctx and its phase", function()
        local r = assert(get("/thread_req?x=7"))
        assert.are.equal(200, r.status)
        assert.are.equal("thread phase=content x=7 method=GET ctx=handler's req=7\n" ..
            "handler true done nested=content /thread_req\n", r.body)
    end)

    it("wait for a route's threads before its log phase; a thread reads ngx.var after the answer", function()
        local key = new_key("thread")
        local r = assert(get("/phase_thread?key=" .. key))
        assert.are.equal("answered", r.body)
        assert.are.equal("access", state(key, "order").order)
        assert.are.equal("content:" .. key .. " log=log", state(key, "after").after)
    end)

    it("end a plain handler with ngx.exit", function()
        local r = assert(get("/exit_plain"))
        assert.are.equal(404, r.status)
        assert.are.equal("404 Not Found\n", r.body)
        r = assert(get("/exit_plain?case=ok"))
        assert.are.equal(201, r.status)
        assert.are.equal("before", r.headers["x-set"])
        assert.are.equal("", r.body)
    end)
end)

describe("a handler whose client left", function()
    for _, wait in ipairs { "sleep", "http", "redis", "mysql", "socket" } do
        it("goes on through a wait in " .. wait .. " and its log gives the lock back", function()
            local key = new_key("lock-" .. wait)
            local path = "/phase_lock?wait=" .. wait .. "&ms=300&key=" .. key
            local r, err = get(path, { timeout = 100 }) -- leaves mid-wait
            assert.is_nil(r)
            assert.are.equal("timeout", err)
            r = assert(get(path))                       -- the lock is held
            assert.are.equal(409, r.status)
            local s = state(key, "log")
            assert.are.equal("nil closed", s.answer)    -- its answer went nowhere
            assert.are.equal(499, s.log)
            assert.is_nil(s.lock)                       -- given back
            r = assert(get("/phase_lock?wait=sleep&ms=1&key=" .. key))
            assert.are.equal(200, r.status)
            assert.are.equal("done", r.body)
        end)
    end

    it("is told at once by ngx.on_abort, and goes on", function()
        local key = new_key("abort")
        local t0 = mf.now()
        assert.is_nil(get("/phase_abort?ms=400&key=" .. key, { timeout = 50 }))
        local s = state(key, "log")
        assert.is_number(s.aborted)
        assert.is_true(s.aborted < t0 + 300)            -- before its wait ended
        assert.is_number(s.after)                       -- it went on
        assert.are.equal(499, s.log)
    end)

    it("ends at once with on_abort = \"stop\", and its log runs", function()
        local key = new_key("stop")
        assert.is_nil(get("/phase_stop?ms=300&key=" .. key, { timeout = 50 }))
        local s = state(key, "log")
        assert.are.equal(499, s.log)
        mf.sleep(400)
        assert.is_nil(state(key).after)                 -- stopped mid-wait
    end)
end)
