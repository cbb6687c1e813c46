-- mf.http.* and mf.task.http against the test fixture (spec/fixture),
-- started by spec/lua/run_specs.py on the port in MF_HTTP_PORT.
local mf = require "moonflow"

local port = os.getenv("MF_HTTP_PORT")
local base = port and ("http://127.0.0.1:" .. port) or nil

-- A port where nothing listens: bound once, then closed by the runner.
local dead = os.getenv("MF_DEAD_PORT") or "1"

describe("mf.http", function()
    setup(function()
        assert(base, "MF_HTTP_PORT is not set: run through spec/lua/run_specs.py")
    end)

    it("get returns {status, headers, body}", function()
        local r, err = mf.http.get(base .. "/")
        assert.is_nil(err)
        assert.are.equal(200, r.status)
        assert.are.equal("0123456789abcdef", r.body)
        assert.are.equal("text/plain", r.headers["content-type"])
    end)

    it("looks headers up in any case", function()
        local r = assert(mf.http.get(base .. "/"))
        assert.are.equal(r.headers["content-type"], r.headers["Content-Type"])
        assert.are.equal("16", r.headers["CONTENT-LENGTH"])
        assert.is_nil(r.headers["x-not-there"])
    end)

    it("returns any status as a response, not an error", function()
        local r, err = mf.http.get(base .. "/missing")
        assert.is_nil(err)
        assert.are.equal(404, r.status)
    end)

    it("post sends the body", function()
        local r = assert(mf.http.post(base .. "/echo", "hello body"))
        assert.are.equal("POST", r.headers["x-method"])
        assert.are.equal("10", r.headers["x-body-length"])
        assert.are.equal("hello body", r.body)
    end)

    it("request takes method, headers and body", function()
        local r = assert(mf.http.request {
            method = "PUT", url = base .. "/echo", body = "{}",
            headers = { ["Content-Type"] = "application/json" },
        })
        assert.are.equal("PUT", r.headers["x-method"])
        assert.are.equal("{}", r.body)
    end)

    it("passes request headers through", function()
        local r = assert(mf.http.get(base .. "/info", {
            headers = { ["X-One"] = "1", ["X-Two"] = "2" } }))
        assert.matches("method=GET", r.body)
        -- Host, X-One, X-Two at least
        assert.is_true(tonumber(r.body:match("headers=(%d+)")) >= 3)
    end)

    it("returns nil, 'timeout' when the server is too slow", function()
        local t0 = mf.now()
        local r, err = mf.http.get(base .. "/held?ms=2000", { timeout = 50 })
        assert.is_nil(r)
        assert.are.equal("timeout", err)
        assert.is_true(mf.now() - t0 < 1500)
    end)

    it("returns nil, 'connection refused' when nothing listens", function()
        local r, err = mf.http.get("http://127.0.0.1:" .. dead .. "/",
                                                              { retries = 0 })
        assert.is_nil(r)
        assert.are.equal("connection refused: http://127.0.0.1:" .. dead, err)
    end)

    it("returns nil, 'tls error' when the server does not speak TLS", function()
        local r, err = mf.http.get("https://127.0.0.1:" .. port .. "/",
                                                              { timeout = 3000 })
        assert.is_nil(r)
        assert.are.equal("tls error: https://127.0.0.1:" .. port, err)
    end)

    it("returns nil, 'invalid argument' for a URL it cannot use", function()
        local r, err = mf.http.get("ftp://example/")
        assert.is_nil(r)
        assert.are.equal("invalid argument: malformed URL 'ftp://example/': "
            .. "scheme 'ftp' (http:// or https:// expected)", err)
    end)

    it("follows redirects when asked, and reports the final url", function()
        local odd = "http://127.0.0.1:" .. os.getenv("MF_ODD_PORT")
        local r = assert(mf.http.get(odd .. "/redirect"))
        assert.are.equal(302, r.status) -- redirects = 0 by default
        r = assert(mf.http.get(odd .. "/redirect", { redirects = 2 }))
        assert.are.equal(200, r.status)
        assert.are.equal(base .. "/", r.url)
        assert.are.equal("0123456789abcdef", r.body)
    end)

    it("returns nil, 'too many redirects' when following runs out", function()
        local odd = "http://127.0.0.1:" .. os.getenv("MF_ODD_PORT")
        local r, err = mf.http.get(odd .. "/redirect-loop", { redirects = 3 })
        assert.is_nil(r)
        assert.are.equal("too many redirects", err)
        r = assert(mf.http.get(odd .. "/redirect-loop")) -- none followed
        assert.are.equal(302, r.status)
    end)

    it("drops credentials when a redirect goes to another origin", function()
        local odd = "http://127.0.0.1:" .. os.getenv("MF_ODD_PORT")
        local creds = { Authorization = "Bearer secret", cookie = "s=1",
                        ["X-Keep"] = "1" }
        local direct = assert(mf.http.get(base .. "/info", { headers = creds }))
        local moved = assert(mf.http.get(odd .. "/redirect?to=" .. base .. "/info",
            { redirects = 1, headers = creds }))
        assert.are.equal(base .. "/info", moved.url)
        local function count(r) return tonumber(r.body:match("headers=(%d+)")) end
        assert.are.equal(count(direct) - 2, count(moved))
    end)

    it("returns nil, 'message too long' for a body over max_body", function()
        local r, err = mf.http.get(base .. "/", { max_body = 15 })
        assert.is_nil(r)
        assert.are.equal("message too long", err)
        r = assert(mf.http.get(base .. "/", { max_body = 16 }))
        assert.are.equal("0123456789abcdef", r.body)
    end)

    it("returns nil, 'connection closed' for a head cut by the close", function()
        local odd = "http://127.0.0.1:" .. os.getenv("MF_ODD_PORT")
        local r, err = mf.http.get(odd .. "/cut")
        assert.is_nil(r)
        assert.are.equal("connection closed", err)
    end)

    it("raises on a bad max_body and on a field it does not know", function()
        for _, bad in ipairs({ -1, 1.5, "10" }) do
            assert.has_error(function()
                mf.http.get(base .. "/", { max_body = bad })
            end)
        end
        assert.has_error(function()
            mf.http.get(base .. "/", { max_response_body = 10 })
        end, "http task: unknown field 'max_response_body'")
        assert.has_error(function()
            mf.http.get(base .. "/", { insecure_redirects = "yes" })
        end)
    end)

    it("says the response's HTTP version", function()
        local r = assert(mf.http.get(base .. "/"))
        assert.are.equal("1.1", r.version)
        -- http2 = true is the default: on http:// it is HTTP/1.1 still
        r = assert(mf.http.get(base .. "/", { http2 = true }))
        assert.are.equal("1.1", r.version)
    end)

    it("raises on an http2 that is not true, false or 'prior_knowledge'", function()
        for _, bad in ipairs({ "yes", 2, "h2c" }) do
            assert.has_error(function()
                mf.http.get(base .. "/", { http2 = bad })
            end, "http task: http2 must be true, false or 'prior_knowledge'")
        end
    end)

    it("returns nil, 'protocol error' for an answer that is not HTTP", function()
        local odd = "http://127.0.0.1:" .. os.getenv("MF_ODD_PORT")
        local r, err = mf.http.get(odd .. "/garbage", { retries = 0 })
        assert.is_nil(r)
        assert.are.equal("protocol error", err)
    end)

    it("raises on a missing url (a programmer error)", function()
        assert.has_error(function() mf.http.request {} end)
        assert.has_error(function() mf.http.get(42) end)
        assert.has_error(function()
            mf.http.request { url = base, headers = "x" }
        end)
    end)
end)

describe("mf.http over TLS", function()
    local tls_port = os.getenv("MF_HTTPS_PORT")
    local ca_file = os.getenv("MF_CA_FILE")
    local url = tls_port and ("https://127.0.0.1:" .. tls_port .. "/echo")

    -- First: the client pools connections by endpoint and verification mode,
    -- not by CA file, so a connection verified with ca_file would be reused.
    it("returns nil, 'tls error' for a certificate it cannot verify", function()
        local r, err = mf.http.get(url, { retries = 0 })
        assert.is_nil(r)
        assert.matches("^tls error: https://127%.0%.0%.1:" .. tls_port
            .. ": %d+: self%-signed certificate", err)
    end)

    it("verifies the server against ca_file", function()
        local r, err = mf.http.post(url, "secret", { ca_file = ca_file })
        assert.is_nil(err)
        assert.are.equal(200, r.status)
        assert.are.equal("secret", r.body)
    end)

    it("skips verification with verify = false", function()
        local r = assert(mf.http.get(url, { verify = false }))
        assert.are.equal(200, r.status)
    end)

    it("stays on HTTP/1 when the server does not pick h2 by ALPN", function()
        -- Python's http.server: no ALPN, and it answers as HTTP/1.0
        local odd = "https://127.0.0.1:" .. os.getenv("MF_ODD_TLS_PORT")
        local r = assert(mf.http.get(odd .. "/redirect?to=/x",
            { ca_file = ca_file }))
        assert.are.equal(302, r.status)
        assert.are.equal("1.0", r.version)
        r = assert(mf.http.get(odd .. "/redirect?to=/x",
            { ca_file = ca_file, http2 = false }))
        assert.are.equal("1.0", r.version)
    end)

    it("refuses an https to http redirect unless insecure_redirects", function()
        local odd = "https://127.0.0.1:" .. os.getenv("MF_ODD_TLS_PORT")
        local opts = { redirects = 2, ca_file = ca_file }
        local r, err = mf.http.get(odd .. "/redirect", opts)
        assert.is_nil(r)
        assert.are.equal("insecure redirect", err)
        opts.insecure_redirects = true
        r = assert(mf.http.get(odd .. "/redirect", opts))
        assert.are.equal(200, r.status)
        assert.are.equal("http://127.0.0.1:" .. os.getenv("MF_HTTP_PORT") .. "/",
                         r.url)
    end)
end)

describe("mf.task.http", function()
    it("runs requests side by side in a parallel", function()
        -- In turn the two held requests would take at least 400 ms;
        -- side by side about 200, with room for a loaded machine.
        local t0 = mf.now()
        local r = mf.parallel {
            mf.task.http { url = base .. "/held?ms=200" },
            mf.task.http { url = base .. "/held?ms=200" },
            mf.task.http { url = base .. "/echo", body = "x" },
        }:wait()
        local took = mf.now() - t0
        assert.is_true(took >= 200 and took < 350, "took " .. took)
        assert.are.equal("held\n", r[1].body)
        assert.are.equal(200, r[2].status)
        assert.are.equal("POST", r[3].headers["X-Method"])
    end)

    it("reports failures as the task's state and error", function()
        local r = mf.series {
            mf.task.http { url = base .. "/held?ms=1000", timeout = 30 },
            mf.task.http { url = "http://127.0.0.1:" .. dead .. "/", retries = 0 },
            mf.task.http { url = base .. "/" },
        }:wait()
        assert.are.equal("timeout", r[1].state)
        assert.are.equal("system error", r[2].state)
        assert.are.equal("connection refused: http://127.0.0.1:" .. dead, r[2].error)
        assert.are.equal("success", r[3].state)
        assert.is_nil(r[2].status)
    end)

    it("hands each response to its callback", function()
        local bodies = {}
        mf.series {
            mf.task.http { url = base .. "/echo", body = "one",
                callback = function(res) bodies[#bodies + 1] = res.body end },
            mf.task.http { url = base .. "/echo", body = "two",
                callback = function(res) bodies[#bodies + 1] = res.body end },
        }:wait()
        assert.are.same({ "one", "two" }, bodies)
    end)
end)

describe("mf.http and the host's counts", function()
    it("are back to baseline after many requests, timeouts and failures", function()
        collectgarbage()
        local before = mf.debug.counts()
        for _ = 1, 5 do
            local steps = {}
            for i = 1, 20 do
                steps[#steps + 1] = (i % 2 == 0)
                    and mf.task.http { url = base .. "/held?ms=500", timeout = 5 }
                    or mf.task.http { url = base .. "/echo", body = tostring(i) }
            end
            steps[#steps + 1] = mf.task.http {
                url = "http://127.0.0.1:" .. dead .. "/", retries = 0 }
            local r = mf.parallel(steps):wait()
            assert.are.equal("timeout", r[2].state)
            assert.are.equal("3", r[3].body)
            assert.are.equal("connection refused: http://127.0.0.1:" .. dead,
                r[21].error)
        end
        mf.sleep(10)
        collectgarbage()
        local after = mf.debug.counts()
        assert.are.equal(before.coroutines, after.coroutines)
        assert.are.equal(before.refs, after.refs)
        assert.are.equal(before.flows, after.flows)
    end)
end)
