-- mf.capture and mf.capture_multi: subrequests inside `moonflow serve`
-- (spec/lua/site/capture.lua, served on MF_SERVE_PORT by run_specs.py),
-- and their refusal anywhere else.
local mf = require "moonflow"

local base = "http://127.0.0.1:" .. assert(os.getenv("MF_SERVE_PORT"))

local function get(path, opts)
    local r = assert(mf.http.request {
        url = base .. path, method = opts and opts.body and "POST" or "GET",
        body = opts and opts.body, headers = opts and opts.headers, timeout = 5000,
    })
    assert.are.equal(200, r.status, r.body)
    return mf.json.decode(r.body)
end

describe("mf.capture", function()
    it("raises outside a moonflow serve handler", function()
        assert.has_error(function() mf.capture("/ok") end,
            "mf.capture: only inside a moonflow serve handler")
        assert.has_error(function() mf.capture_multi { { "/ok" } } end,
            "mf.capture_multi: only inside a moonflow serve handler")
    end)

    it("runs routes side by side: a slow pair overlaps, a failure is a 500, a missing route a 404", function()
        get("/capture?case=multi") -- compiles the routes it reaches
        local before = get("/counts")
        local r = get("/capture?case=multi")
        assert.same({ 200, 200, 500, 404 }, r.statuses)
        assert.is_true(r.a.start < r.b.stop and r.b.start < r.a.stop)
        assert.equals(1, r.a.depth)
        local after = get("/counts")
        assert.equals(before.refs, after.refs)
        assert.equals(before.coroutines, after.coroutines)
    end)

    it("inherits the parent's headers and, for POST, its body", function()
        local r = get("/capture?case=inherit", {
            body = "parent body", headers = { ["User-Agent"] = "spec-agent", ["X-Custom"] = "parent" },
        })
        assert.equals(200, r.status)
        assert.equals("application/json", r.type)
        assert.equals("POST", r.echo.method)
        assert.equals("/echo?q=1", r.echo.uri)
        assert.equals("parent body", r.echo.body)
        assert.equals("spec-agent", r.echo.agent)
        assert.equals("sub", r.echo.custom)
    end)

    it("runs a route's header and body filters on its answer, as on a request's", function()
        local r = get("/capture?case=filtered")
        assert.same({ status = 200, filtered = "yes", body = "SENT|eof" }, r.send)
        assert.same({ status = 200, filtered = "yes", body = "ONE TWO|eof" }, r.write)
        assert.equals(202, r.status.status)
        local direct = assert(mf.http.get(base .. "/sub_filters"))
        assert.equals("content|[body_filter]b|[body_filter][body_filter,eof]", direct.body)
        assert.equals("header_filter", direct.headers["x-phase"])
        assert.same({ phase = "header_filter", body = direct.body }, r.marks)
    end)

    it("raises on misuse inside a handler", function()
        local r = get("/capture?case=misuse")
        assert.matches("a path such as", r[1])
        assert.matches("unknown option 'nope'", r[2])
        assert.matches("method must be an uppercase name", r[3])
        assert.matches("a list of {uri, opts} expected", r[4])
    end)
end)
