-- require "moonflow.ngx": OpenResty's ngx API as far as moonflow answers
-- it, checked against OpenResty's documented results, and Debian's
-- lua-resty-lrucache (resty.lrucache) loaded and used unchanged on it.
local mf = require "moonflow"

describe("moonflow.ngx", function()
    local ngx = require "moonflow.ngx"

    it("installs the global ngx", function()
        assert.equals(ngx, _G.ngx)
        assert.equals(mf.null, ngx.null)
        assert.equals(4, ngx.ERR)
        assert.equals("http", ngx.config.subsystem)
        assert.equals(mf.worker.id, ngx.worker.id())
        assert.is_true(ngx.worker.pid() > 0)
        -- cosockets are mf.socket's (socket_spec.lua, openresty_libs_spec.lua)
        assert.equals(mf.socket.tcp, ngx.socket.tcp)
        assert.equals(mf.socket.udp, ngx.socket.udp)
        assert.equals(mf.socket.connect, ngx.socket.connect)
    end)

    it("maps the utilities with OpenResty's results", function()
        assert.equals("aGVsbG8=", ngx.encode_base64("hello"))
        assert.equals("aGVsbG8", ngx.encode_base64("hello", true))
        assert.equals("hello", ngx.decode_base64("aGVsbG8="))
        assert.is_nil(ngx.decode_base64("not base64!"))
        assert.equals("5d41402abc4b2a76b9719d911017c592", ngx.md5("hello"))
        assert.equals(16, #ngx.md5_bin("hello"))
        assert.equals("effcdf6ae5eb2fa2d27416d5f184df9c259a7c79",
                      mf.hex.encode(ngx.hmac_sha1("Jefe", "what do ya want for nothing?")))
        assert.equals(20, #ngx.sha1_bin("x"))
        assert.equals("b%20r56%2B7", ngx.escape_uri("b r56+7"))
        assert.equals("b r56 7", ngx.unescape_uri("b%20r56+7"))
        assert.equals("'a\\'b\\nc'", ngx.quote_sql_str("a'b\nc"))
        assert.equals("a=1&b=2", ngx.encode_args { a = 1, b = 2 })
        assert.are.same({ a = "1" }, ngx.decode_args("a=1"))
        assert.equals("1234", ngx.re.match("ab1234", [[\d+]])[0])
        assert.equals("aXc", (ngx.re.sub("abc", "b", "X")))
    end)

    it("sleeps in seconds and tells the time in seconds", function()
        local t0 = ngx.now()
        ngx.sleep(0.01)
        assert.is_true(ngx.now() - t0 >= 0.009)
        assert.is_true(math.abs(ngx.time() - os.time()) <= 1)
        assert.has_error(function() ngx.log(42, "x") end)
        ngx.log(ngx.DEBUG, "ngx_spec: ", "a line below the level")
    end)

    it("runs timers with premature = false, and threads", function()
        local q = mf.queue()
        assert.is_true(ngx.timer.at(0.001, function(premature, v) q:push({ premature, v }) end, "x"))
        assert.are.same({ false, "x" }, q:pop(1000))
        local t = ngx.thread.spawn(function(a) return a + 1 end, 1)
        assert.are.same({ true, 2 }, { ngx.thread.wait(t) })
        local slow = ngx.thread.spawn(function() ngx.sleep(0.2) return "slow" end)
        local fast = ngx.thread.spawn(function() return "fast" end)
        assert.are.same({ true, "fast" }, { ngx.thread.wait(slow, fast) })
        slow:wait()
    end)

    it("runs Debian's lua-resty-lrucache unchanged", function()
        local lrucache = require "resty.lrucache"
        local c = assert(lrucache.new(2))
        c:set("a", 1)
        c:set("b", 2, 0.05) -- seconds
        c:set("c", 3)     -- evicts the least recently used: a
        assert.is_nil(c:get("a"))
        assert.equals(2, c:get("b"))
        assert.equals(3, c:get("c"))
        ngx.sleep(0.08)
        local v, stale = c:get("b")
        assert.is_nil(v)
        assert.equals(2, stale)
        c:delete("c")
        assert.is_nil(c:get("c"))
    end)
end)

describe("moonflow.ngx's request mapping (ngx.handler)", function()
    local ngx = require "moonflow.ngx"
    local serve = "http://127.0.0.1:" .. assert(os.getenv("MF_SERVE_PORT"))

    it("maps ngx.var, ngx.req and ngx.header onto the handler's request", function()
        local r = assert(mf.http.request {
            method = "POST", url = serve .. "/ngx_req?a=1&flag&a=2",
            headers = { ["X-Test"] = "t", Cookie = "c=cookie" }, body = "payload",
        })
        assert.equals(200, r.status)
        assert.equals("set", r.headers["x-from-ngx"])
        local j = mf.json.decode(r.body)
        assert.equals("/ngx_req", j.uri)
        assert.equals("/ngx_req?a=1&flag&a=2", j.request_uri)
        assert.equals("a=1&flag&a=2", j.args)
        assert.equals("POST", j.method)
        assert.equals("POST", j.get_method)
        assert.equals("1", j.arg_a)
        assert.equals("", j.arg_flag)
        assert.equals("cookie", j.cookie_c)
        assert.equals("t", j.http_x_test)
        assert.equals("t", j.header)
        assert.equals("127.0.0.1", j.remote_addr)
        assert.is_nil(j.unknown)
        assert.are.same({ "1", "2" }, j.get_uri_args.a)
        assert.equals("payload", j.body)
        assert.equals("set", j.header_back)
        assert.is_false(j.thread_had_request)
    end)

    it("re-raises a handler's error with the traceback of where it was raised", function()
        local function deep_in_the_handler() error("boom") end
        local h = ngx.handler(function() deep_in_the_handler() end)
        local ok, err = pcall(h, {}, {})
        assert.is_false(ok)
        assert.matches("boom\nstack traceback:", err)
        assert.matches("deep_in_the_handler", err)
        local object = {}
        ok, err = pcall(ngx.handler(function() error(object) end), {}, {})
        assert.equals(object, err) -- an error object passes as it is
    end)

    it("raises outside a request", function()
        assert.has_error(function() return ngx.var.uri end)
        assert.has_error(function() ngx.header.x = "y" end)
        assert.has_error(function() ngx.req.get_headers() end)
        assert.has_error(function() ngx.var.uri = "/x" end)
    end)
end)
