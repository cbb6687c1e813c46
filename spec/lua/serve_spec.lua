-- moonflow serve, through HTTP: handlers in spec/lua/site served by
-- `moonflow serve` (one worker) that run_specs.py starts on MF_SERVE_PORT.
local mf = require "moonflow"

local base = "http://127.0.0.1:" .. assert(os.getenv("MF_SERVE_PORT"))

local function get(path, opts)
    return mf.http.get(base .. path, opts)
end

local function counts()
    local r = assert(get("/counts"))
    return mf.json.decode(r.body)
end

describe("moonflow serve", function()
    it("answers a handler's response", function()
        local r = assert(get("/ok"))
        assert.are.equal(200, r.status)
        assert.are.equal("ok", r.body)
        assert.are.equal("text/plain; charset=utf-8", r.headers["content-type"])
    end)

    it("answers resp:json with the document, its type and status", function()
        local r = assert(get("/json"))
        assert.are.equal(200, r.status)
        assert.are.equal("application/json", r.headers["content-type"])
        assert.are.same({ n = 42, list = { 1, 2.5, "three", mf.null }, s = "a\"b\n" },
            mf.json.decode(r.body))
        r = assert(get("/json?case=status"))
        assert.are.equal(201, r.status)
        assert.are.equal(42, mf.json.decode(r.body).n)
        r = assert(get("/json?case=type"))
        assert.are.equal(409, r.status)
        assert.are.equal("application/problem+json", r.headers["content-type"])
        assert.are.equal('{"title":"nope"}', r.body)
        r = assert(get("/json?case=bad"))
        assert.are.equal(500, r.status)
        r = assert(get("/json?case=late"))
        assert.matches("^streamed false .*already sent", r.body)
        r = assert(get("/json?case=badstatus"))
        assert.matches("^false .*an HTTP status %(100%-999%) expected", r.body)
    end)

    it("reads req.cookies and sets cookies with resp:set_cookie", function()
        local r = assert(mf.http.request {
            url = base .. "/cookies",
            headers = { Cookie = 'a=1; b="quoted"; junk; a=second' },
        })
        assert.equals(200, r.status)
        assert.are.same({ a = "1", b = "quoted" }, mf.json.decode(r.body))
        -- two Set-Cookie fields, which the client joins with ", "
        assert.equals("session=abc123; Max-Age=3600; Path=/; HttpOnly; SameSite=Lax, "
                      .. "theme=dark", r.headers["set-cookie"])
        r = assert(get("/cookies?case=bad"))
        assert.matches("^false .*a cookie value without spaces", r.body)
    end)

    it("reads urlencoded and multipart forms with req:form()", function()
        local function post(type, body, path)
            local r = assert(mf.http.request {
                method = "POST", url = base .. (path or "/form"), body = body,
                headers = type and { ["Content-Type"] = type } or nil,
            })
            return r.status, mf.json.decode(r.body)
        end
        local status, form = post("application/x-www-form-urlencoded",
                                  "a=1&b=x+y&a=2&flag")
        assert.equals(200, status)
        assert.are.same({ a = { "1", "2" }, b = "x y", flag = true }, form)
        local body = "--B0\r\nContent-Disposition: form-data; name=\"title\"\r\n\r\n"
            .. "hello\r\n--B0\r\nContent-Disposition: form-data; name=\"up\"; "
            .. "filename=\"a.bin\"\r\nContent-Type: application/octet-stream\r\n\r\n"
            .. "\0\1\r\n--B0-\r\n--B0--\r\n"
        status, form = post("multipart/form-data; boundary=B0", body)
        assert.equals(200, status)
        assert.equals("hello", form.title)
        assert.are.same({ filename = "a.bin", content_type = "application/octet-stream",
                          data = "\0\1\r\n--B0-" }, form.up)
        status, form = post("multipart/form-data; boundary=B0", body:sub(1, 60))
        assert.equals(400, status)
        assert.equals("bad multipart body (part 1)", form.error)
        status, form = post("text/plain", "a=1")
        assert.equals(400, status)
        assert.equals("not a form (Content-Type text/plain)", form.error)
        status, form = post("application/x-www-form-urlencoded", "a=1&b=2&c=3",
                            "/form?max=2")
        assert.equals(400, status)
        assert.equals("too many form fields (more than 2)", form.error)
    end)

    it("routes folders to index.lua and unknown paths to 404", function()
        assert.are.equal("api index", assert(get("/api/")).body)
        assert.are.equal("api index", assert(get("/api")).body)
        assert.are.equal(404, assert(get("/nope")).status)
        assert.are.equal(404, assert(get("/../etc/passwd")).status)
        assert.are.equal(404, assert(get("/.hidden")).status)
    end)

    it("gives the request's fields to the handler", function()
        local r = assert(mf.http.request {
            method = "POST", url = base .. "/echo?a=1&a=2&b=x%20y&flag",
            headers = { ["User-Agent"] = "spec", ["X-Custom"] = "c",
                        ["X-Request-Id"] = "spec-1" },
            body = "payload",
        })
        local e = mf.json.decode(r.body)
        assert.are.equal("spec-1", e.id)
        assert.are.equal("POST", e.method)
        assert.are.equal("/echo", e.path)
        assert.are.equal("/echo?a=1&a=2&b=x%20y&flag", e.uri)
        assert.are.equal("1.1", e.version)
        assert.are.same({ "1", "2" }, e.query.a)
        assert.are.equal("x y", e.query.b)
        assert.are.equal(true, e.query.flag)
        assert.are.equal("payload", e.body)
        assert.are.equal("spec", e.agent)      -- any spelling of the name
        assert.are.equal("c", e.custom)
        assert.truthy(e.peer:match("^127%.0%.0%.1:%d+$"))
        local made = mf.json.decode(assert(get("/echo")).body).id
        assert.truthy(made:match("^" .. ("%x"):rep(32) .. "$"))
    end)

    it("sets status and headers, redirects, streams and answers on return", function()
        local r = assert(get("/status"))
        assert.are.equal(201, r.status)
        assert.are.equal("yes", r.headers["x-test"])
        assert.are.equal("created", r.body)
        r = assert(get("/redirect"))
        assert.are.equal(301, r.status)
        assert.are.equal("/ok", r.headers["location"])
        r = assert(get("/stream"))
        assert.are.equal("part 1\npart 2\npart 3\n", r.body)
        assert.are.equal("chunked", r.headers["transfer-encoding"])
        assert.are.equal(204, assert(get("/nosend")).status)
    end)

    it("raises when a method gets something else than its object", function()
        local body = assert(get("/misuse")).body
        local first, second = body:match("^(.-)\n(.*)$")
        assert.truthy(first:match("^false .*moonflow request or response"))
        assert.truthy(second:match("^false .*moonflow request or response"))
    end)

    it("raises on each bad argument of resp:proxy, naming it", function()
        local r = assert(get("/proxy_args"))
        assert.are.equal(200, r.status)
        local lines = {}
        for line in r.body:gmatch("[^\n]+") do lines[#lines + 1] = line end
        assert.are.equal(11, #lines)
        local want = {
            "^false resp:proxy%(url %[, opts%]%): url: a string expected",
            "^false .*an http:// or https:// URL expected",
            "^false resp:proxy%(url %[, opts%]%): opts: a table expected, got string",
            "^false .*unknown option 'retries'",
            "^false .*option 'timeout' must be a number",
            "^false .*option 'timeout' must be 0 to 86400000 ms",
            "^false .*option 'tries' must be an integer from 1 to 16",
            "^false .*option 'via' must be true, false or a name",
            "^false .*headers: a header name expected",
            "^false .*headers%['X%-A'%]: a string, a number or false",
            "^false .*headers%['X%-A'%]: a string, a number or false",
        }
        for i, pattern in ipairs(want) do
            assert.matches(pattern, lines[i], 1, false, "line " .. i)
        end
    end)

    it("names the method in every misuse of req and resp", function()
        local r = assert(get("/misuse_names"))
        assert.equals(200, r.status)
        local calls = mf.json.decode(r.body)
        assert.is_true(#calls >= 13)
        for _, c in ipairs(calls) do
            assert.is_true(c.raised, c.name .. " raised nothing")
            assert.is_nil(c.err:find("'?'", 1, true), c.err)
            assert.is_nil(c.err:find("bad argument", 1, true), c.err)
            assert.truthy(c.err:find(c.name .. "(", 1, true), c.name .. " not named in: " .. c.err)
        end
    end)

    it("lets only the handler's coroutine use req and resp", function()
        local r = assert(get("/owner?step=during"))
        assert.truthy(r.body:match("^false .*not its handler"), r.body)
        assert.are.equal("kept", assert(get("/owner?step=keep")).body)
        mf.sleep(100)
        r = assert(get("/owner?step=report"))
        assert.truthy(r.body:match("^false .*request is over"), r.body)
        assert.truthy(r.body:match("status=0 sent=true$"), r.body)
        r = assert(get("/owner?step=callback"))
        assert.are.equal("after callback", r.body)
        assert.are.equal("yes", r.headers["x-callback"])
    end)

    it("shows each request only its own fields", function()
        for i = 1, 50 do
            local r = assert(get("/owner?step=fresh&v=" .. i))
            assert.are.equal(i .. " true", r.body)
        end
    end)

    it("raises when set_header or redirect gets a bad name or value", function()
        local r = assert(get("/headers?case=raises"))
        assert.are.equal(200, r.status)
        assert.are.equal(("false "):rep(7) .. "false", r.body)
        assert.are.equal("a, 2", r.headers["x-list"]) -- two lines, joined
    end)

    it("answers 500 when resp.headers holds a header that cannot be sent", function()
        local before = counts()
        for _, case in ipairs { "managed", "ctl", "type", "name", "ret", "write" } do
            local r = assert(get("/headers?case=" .. case))
            assert.are.equal(500, r.status, case)
            assert.are.equal("close", r.headers["connection"], case)
            assert.is_nil(r.body:match("never sent"), case)
            assert.is_nil(r.headers["x-bad"], case)
        end
        local after = counts()
        assert.are.equal(before.errors, after.errors) -- answered, not raised
        assert.are.equal(before.coroutines, after.coroutines)
        assert.are.equal(before.refs, after.refs)
        assert.are.equal(200, assert(get("/ok")).status)
    end)

    it("trims the spaces around a header value", function()
        local r = assert(get("/headers?case=trim"))
        assert.are.equal("padded", r.headers["x-trim"])
    end)

    it("raises when a header is set after the head was streamed", function()
        local r = assert(get("/headers?case=late"))
        assert.are.equal("streamed", r.body)
        assert.is_nil(r.headers["x-late"])
    end)

    it("turns a Lua error into a 500 and serves the next request", function()
        local before = counts()
        local r = assert(get("/error"))
        assert.are.equal(500, r.status)
        r = assert(get("/ok"))
        assert.are.equal(200, r.status)
        local after = counts()
        assert.are.equal(before.errors + 1, after.errors)
        assert.are.equal(before.coroutines, after.coroutines)
    end)

    it("leaks nothing when clients leave while their handlers wait", function()
        assert(get("/slow?ms=1")) -- load the route: its handler holds a ref
        local before = counts()
        for _ = 1, 20 do
            local r, err = get("/slow?ms=300", { timeout = 30 })
            assert.is_nil(r)
            assert.are.equal("timeout", err)
        end
        local after
        for _ = 1, 100 do -- the handlers go on to their end (as OpenResty's)
            mf.sleep(20)
            after = counts()
            if after.coroutines == before.coroutines then break end
        end
        assert.are.equal(before.coroutines, after.coroutines)
        assert.are.equal(before.refs, after.refs)
        assert.are.equal(before.timers, after.timers)
    end)

    it("reuses the threads of handlers that returned", function()
        -- Three handlers at once need three threads; once they are done,
        -- the /counts handler runs on one of them and two wait idle.
        local steps = {}
        for i = 1, 3 do steps[i] = mf.task.http { url = base .. "/slow?ms=50" } end
        mf.parallel(steps):wait()
        local c = counts()
        assert.is_true(c.idle_threads >= 2)
        local resumes = c.resumes
        for _ = 1, 10 do assert(get("/ok")) end
        c = counts()
        assert.is_true(c.idle_threads >= 2) -- taken and given back each time
        assert.are.equal(resumes + 11, c.resumes)
    end)

    it("serves many handlers at once on one worker", function()
        local steps = {}
        for i = 1, 50 do
            steps[i] = mf.task.http { url = base .. "/slow?ms=100" }
        end
        local t0 = mf.now()
        local r = mf.parallel(steps):wait()
        for i = 1, 50 do
            assert.are.equal("slow done", r[i].body)
        end
        assert.is_true(mf.now() - t0 < 2000) -- waited side by side
    end)

    it("waits on an mf.graph in a handler", function()
        local r = assert(get("/graph"))
        assert.are.equal(200, r.status, r.body)
        assert.are.same({ a = "a", b = "b", c = "task error", d = "skipped: 'c' failed" },
            mf.json.decode(r.body))
    end)
end)
