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

    it("tells the epoch time to the millisecond (ngx.now between the wall clock before and after the loop's turn)", function()
        local ffi = require "ffi"
        pcall(ffi.cdef, [[
            struct ngx_spec_timeval { long sec; long usec; };
            int ngx_spec_gettimeofday(struct ngx_spec_timeval *tv, void *tz) __asm__("gettimeofday");
        ]])
        local tv = ffi.new("struct ngx_spec_timeval")
        local function wall()
            ffi.C.ngx_spec_gettimeofday(tv, nil)
            return tonumber(tv.sec) + tonumber(tv.usec) / 1e6
        end
        -- ngx.now is the loop's clock at its turn, in whole milliseconds
        -- (rounded down): after a sleep it lies between the wall clock
        -- read before the sleep (less that millisecond) and the wall
        -- clock read after it. The bounds hold however long
        -- the machine keeps this thread off a core; how close ngx.now
        -- comes is checked on the closest of twenty turns.
        local closest = math.huge
        for _ = 1, 20 do
            local before = wall()
            ngx.sleep(0.003) -- a turn of the loop: its cached time is fresh
            local now = ngx.now()
            local after = wall()
            assert.is_true(now >= before - 0.001 and now <= after,
                           ("ngx.now %f, wall %f .. %f"):format(now, before, after))
            closest = math.min(closest, after - now)
            assert.equals(now, math.floor(now * 1000 + 0.5) / 1000) -- milliseconds
            -- (not against os.time: time(2) reads the coarse clock, a tick
            -- behind gettimeofday across a second's edge)
            assert.equals(math.floor(now), ngx.time())
        end
        assert.is_true(closest < 0.010, ("closest %f s behind the wall clock"):format(closest))
        assert.equals(math.floor(ngx.now()), ngx.time())
        -- the loop's cached time, as nginx's: stale while Lua runs, fresh
        -- again at ngx.update_time
        local t0 = ngx.now()
        local until_ = wall() + 0.030
        while wall() < until_ do end
        assert.equals(t0, ngx.now())
        local before = wall()
        ngx.update_time()
        local now = ngx.now()
        local after = wall()
        assert.is_true(now - t0 >= 0.029)
        assert.is_true(now >= before - 0.001 and now <= after,
                       ("ngx.now %f, wall %f .. %f"):format(now, before, after))
    end)

    it("writes and reads dates as nginx does", function()
        assert.equals("Thu, 18 Nov 2010 11:27:35 GMT", ngx.http_time(1290079655))
        assert.equals("Thu, 18-Nov-10 11:27:35 GMT", ngx.cookie_time(1290079655))
        assert.equals("Sun, 27-Jul-2042 13:14:15 GMT", ngx.cookie_time(2290079655))
        assert.equals(1290079655, ngx.parse_http_time("Thu, 18 Nov 2010 11:27:35 GMT"))
        assert.equals(1290079655, ngx.parse_http_time("Thursday, 18-Nov-10 11:27:35 GMT"))
        assert.equals(1290079655, ngx.parse_http_time("Thu Nov 18 11:27:35 2010"))
        assert.equals(784111777, ngx.parse_http_time("Sun, 06 Nov 1994 08:49:37 GMT"))
        assert.is_nil(ngx.parse_http_time("yesterday"))
        assert.is_nil(ngx.parse_http_time("Thu, 18 Foo 2010 11:27:35 GMT"))
        local now = ngx.time()
        assert.equals(now, ngx.parse_http_time(ngx.http_time(now)))
        assert.equals(os.date("%Y-%m-%d"), ngx.today())
        assert.matches("^%d%d%d%d%-%d%d%-%d%d %d%d:%d%d:%d%d$", ngx.localtime())
        assert.equals(os.date("!%Y-%m-%d %H:%M", now), ngx.utctime():sub(1, 16))
        assert.has_error(function() ngx.http_time("x") end, "ngx.http_time: a number of seconds expected, got string")
    end)

    it("computes CRC-32 as nginx does (crc32_short, crc32_long)", function()
        assert.equals(907060870, ngx.crc32_short("hello"))
        assert.equals(907060870, ngx.crc32_long("hello"))
        assert.equals(0, ngx.crc32_long(""))
        assert.equals(0xCBF43926, ngx.crc32_long("123456789")) -- the check value
        assert.equals(ngx.crc32_short(("x"):rep(1000)), ngx.crc32_long(("x"):rep(1000)))
    end)

    it("maps ngx.re with OpenResty's ctx, nth, res and errors as values", function()
        local ctx = {}
        local from, to = ngx.re.find("hello 1234 5678", [[\d+]], "jo", ctx)
        assert.are.same({ 7, 10, 11 }, { from, to, ctx.pos })
        from, to = ngx.re.find("hello 1234 5678", [[\d+]], "jo", ctx)
        assert.are.same({ 12, 15, 16 }, { from, to, ctx.pos })
        assert.are.same({ 3, 3 }, { ngx.re.find("ab12", [[([a-z])(\d)]], "jo", nil, 2) })
        ctx = { pos = 3 }
        local m = ngx.re.match("ab12cd34", [[[a-z]+(\d+)]], "jo", ctx)
        assert.equals("cd34", m[0])
        assert.equals(9, ctx.pos)
        local res = { stale = true }
        assert.equals(res, ngx.re.match("x=1", [[(\w)=(\d)]], nil, nil, res))
        assert.are.same({ [0] = "x=1", "x", "1" }, res)
        assert.are.same({ nil, 'regex "(": missing closing parenthesis at offset 1' },
                        { ngx.re.match("abc", "(") })
        local f, t, err = ngx.re.find("abc", "(")
        assert.is_nil(f); assert.is_nil(t); assert.matches("missing closing", err)
        local s, n, err2 = ngx.re.gsub("abc", "(", "x")
        assert.is_nil(s); assert.is_nil(n); assert.matches("missing closing", err2)
        assert.are.same({ "a-b-c", 2 }, { ngx.re.gsub("a b c", " ", "-") })
        assert.are.same({ "a-b c", 1 }, { ngx.re.sub("a b c", " ", "-") })
        assert.are.same({ "[1][22]", 2 }, { ngx.re.gsub("1 22", [[(\d+) ?]], "[$1]") })
        local seen = {}
        for mm in ngx.re.gmatch("a1b22", [[\d+]], "U") do seen[#seen + 1] = mm[0] end
        assert.are.same({ "1", "22" }, seen)
        local it, gerr = ngx.re.gmatch("x", "(")
        assert.is_nil(it); assert.matches("missing closing", gerr)
        assert.equals("ABC", (ngx.re.gsub("abc", "[a-z]", function(c) return c[0]:upper() end, "i")))
    end)

    it("splits as resty.core's ngx.re.split does", function()
        local split = ngx.re.split
        assert.are.same({ "a", "b", "c", "d" }, split("a,b,c,d", ","))
        assert.are.same({ "a", ",", "b", ",", "c", ",", "d" }, split("a,b,c,d", "(,)"))
        assert.are.same({ "a", "b", "c", "d" }, split("abcd", ""))
        assert.are.same({ "a", "b,c,d" }, split("a,b,c,d", ",", nil, nil, 2))
        assert.are.same({ "", "a", "b" }, split(",a,b,,", ","))
        assert.are.same({ "a", "b" }, split("a  b", [[\s+]], "jo"))
        local res = { "old", "old", "old" }
        assert.equals(res, split("x;y", ";", nil, nil, nil, res))
        assert.are.same({ "x", "y" }, res)
    end)

    it("has nginx's status constants and config", function()
        assert.equals(200, ngx.HTTP_OK)
        assert.equals(404, ngx.HTTP_NOT_FOUND)
        assert.equals(500, ngx.HTTP_INTERNAL_SERVER_ERROR)
        assert.equals(301, ngx.HTTP_MOVED_PERMANENTLY)
        assert.equals(8, ngx.HTTP_POST)
        assert.equals("http", ngx.config.subsystem)
        assert.equals(10023, ngx.config.ngx_lua_version)
        assert.is_number(ngx.config.nginx_version)
        assert.is_false(ngx.config.debug)
        assert.equals("", ngx.config.prefix())
        assert.equals(mf.worker.count, ngx.worker.count())
        assert.is_false(ngx.worker.exiting())
    end)

    it("raises naming the API for what only nginx can do", function()
        assert.has_error(function() ngx.exec("/x") end,
            "ngx.exec: internal redirects are not supported outside nginx (ngx.location.capture runs another route)")
        assert.has_error(function() ngx.location.capture("/x") end,
            "ngx.location.capture: only inside a moonflow serve handler (subrequests run another route of the site)")
        assert.has_error(function() ngx.location.capture_multi { { "/x" } } end)
        assert.has_error(function() ngx.req.set_body_file("/tmp/x") end,
            "ngx.req.set_body_file: request bodies are never files here")
        assert.has_error(function() ngx.req.init_body() end)
        assert.has_error(function() ngx.req.append_body("x") end)
        assert.has_error(function() ngx.req.finish_body() end)
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
        assert.is_nil(j.arg_flag) -- nginx's $arg_NAME wants "NAME="
        assert.equals("cookie", j.cookie_c)
        assert.equals("t", j.http_x_test)
        assert.equals("t", j.header)
        assert.equals("127.0.0.1", j.remote_addr)
        assert.is_nil(j.unknown)
        assert.are.same({ "1", "2" }, j.get_uri_args.a)
        assert.equals("payload", j.body)
        assert.equals("set", j.header_back)
        assert.is_true(j.thread_had_request)
        assert.equals("/ngx_req", j.thread_uri)
    end)

    -- A request of plain tables, bound by ngx.handler: the variables read
    -- from what it is given.
    local function with_request(req, resp, fn)
        local out
        ngx.handler(function() out = fn() end)(req, resp or { status = 200, headers = {} })
        return out
    end

    it("reads IPv6 peers, the host, response headers and the dates (ngx.var)", function()
        local function req(peer, host)
            return { peer = peer, headers = { host = host }, uri = "/p", path = "/p",
                     method = "GET", version = "1.1", body = "" }
        end
        local v = ngx.var
        local function bin(peer) return with_request(req(peer), nil, function() return v.binary_remote_addr end) end
        assert.equals("00000000000000000000000000000001", mf.hex.encode(bin("[::1]:80")))
        assert.equals("20010db8000000000000ff0000428329", mf.hex.encode(bin("[2001:db8::ff00:42:8329]:1")))
        assert.equals("00000000000000000000ffff01020304", mf.hex.encode(bin("[::ffff:1.2.3.4]:1")))
        assert.equals("fe800000000000000000000000000001", mf.hex.encode(bin("[fe80:0:0:0:0:0:0:1]:1")))
        assert.equals("0a000001", mf.hex.encode(bin("10.0.0.1:9")))
        assert.equals("::1", with_request(req("[::1]:80"), nil, function() return v.remote_addr end))
        assert.equals("80", with_request(req("[::1]:80"), nil, function() return v.remote_port end))
        assert.equals("[::1]", with_request(req("[::1]:1", "[::1]:8080"), nil, function() return v.host end))
        assert.equals("", with_request(req("[::1]:1"), nil, function() return v.host end))
        assert.is_nil(with_request(req("[::1]:1"), nil, function() return v.request_body end))
        assert.is_nil(with_request(req("[::1]:1"), nil, function() return v.args end))
        assert.equals("", with_request(req("[::1]:1"), nil, function() return v.is_args end))
        local q = req("[::1]:1")
        q.uri = "/p?xa=5&A=6&a=7&a-b=8&x.y=9&empty="
        assert.are.same({ "6", "8", "9", "", "5" }, with_request(q, nil, function()
            return { v.arg_a, v["arg_a-b"], v["arg_x.y"], v.arg_empty, v.arg_XA }
        end))
        local resp = { status = 200, headers = { ["X-Out"] = { "a", "b" }, ["Content-Type"] = "t/x" } }
        assert.equals("a, b", with_request(req("[::1]:1"), resp, function() return v.sent_http_x_out end))
        assert.equals("t/x", with_request(req("[::1]:1"), resp, function() return v.sent_http_content_type end))
        local dates = with_request(req("[::1]:1"), nil, function()
            return { v.time_local, v.time_iso8601, v.pid, v.msec }
        end)
        assert.equals(os.date("%d/%b/%Y:%H:%M:%S %z"):sub(1, 11), dates[1]:sub(1, 11))
        assert.matches("^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d[+-]%d%d:%d%d$", dates[2])
        assert.equals(tostring(ngx.worker.pid()), dates[3])
        assert.matches("^%d+%.%d%d%d$", dates[4])
    end)

    it("lists the response's headers (ngx.resp.get_headers), at most max", function()
        local resp = { status = 200, headers = { ["X-A"] = "1", ["X-Multi"] = { "a", "b" } } }
        local got = with_request({ headers = {} }, resp, function()
            ngx.header.content_length = 10 -- kept for reading back
            local h = ngx.resp.get_headers()
            local raw = ngx.resp.get_headers(0, true)
            local few, err = ngx.resp.get_headers(2)
            local n = 0
            for _ in pairs(few) do n = n + 1 end
            return { h = h, raw = raw, n = n, err = err }
        end)
        assert.equals("1", got.h.x_a)
        assert.equals("1", got.h["X-A"])
        assert.are.same({ "a", "b" }, got.h["x-multi"])
        assert.equals("10", got.h.content_length)
        assert.equals("1", got.raw["X-A"])
        assert.is_nil(got.raw["x-a"])
        assert.equals("truncated", got.err)
        assert.is_true(got.n <= 2)
    end)

    it("changes the body the handler reads (ngx.req.set_body_data)", function()
        local got = with_request({ headers = {}, body = "a=1" }, nil, function()
            ngx.req.discard_body()
            local before = ngx.req.get_post_args()
            ngx.req.set_body_data("b=2")
            return { before = before, after = ngx.req.get_post_args(),
                     data = ngx.req.get_body_data(), var = ngx.var.request_body }
        end)
        assert.are.same({ a = "1" }, got.before)
        assert.are.same({ b = "2" }, got.after)
        assert.equals("b=2", got.data)
        assert.equals("b=2", got.var)
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

    it("raises outside a request, naming the API", function()
        assert.has_error(function() return ngx.var.uri end)
        assert.has_error(function() ngx.header.x = "y" end)
        assert.has_error(function() ngx.req.get_headers() end)
        assert.has_error(function() ngx.var.uri = "/x" end)
        for _, name in ipairs { "say", "print", "flush", "eof", "send_headers", "redirect" } do
            local ok, err = pcall(ngx[name], "x")
            assert.is_false(ok)
            assert.matches("ngx." .. name .. ": no request here", err, 1, true)
        end
        for _, name in ipairs { "get_headers", "set_header", "clear_header", "get_uri_args",
                                "set_uri_args", "set_uri", "get_post_args", "read_body",
                                "discard_body", "get_body_data", "set_body_data", "get_body_file",
                                "http_version", "raw_header", "start_time", "get_method",
                                "set_method", "is_internal" } do
            local ok, err = pcall(ngx.req[name], "x")
            assert.is_false(ok)
            assert.matches("ngx.req." .. name .. ": no request here", err, 1, true)
        end
        assert.has_error(function() ngx.resp.get_headers() end)
        assert.has_error(function() return ngx.status end)
        assert.has_error(function() ngx.status = 200 end)
        assert.has_error(function() return ngx.headers_sent end)
        assert.has_error(function() return ngx.is_subrequest end)
    end)
end)

describe("moonflow.ngx in a plain moonflow serve handler (no wrapper)", function()
    local serve_port = assert(os.getenv("MF_SERVE_PORT"))
    local serve = "http://127.0.0.1:" .. serve_port

    local function get(case, opts)
        opts = opts or {}
        opts.url = serve .. "/ngx_api?case=" .. case .. (opts.query or "")
        opts.query = nil
        return assert(mf.http.request(opts))
    end

    it("reads nginx's variables (ngx.var) and writes the writable ones", function()
        local r = get("vars", {
            method = "POST", query = "&a=1&UPPER=u&flag&esc=a%20b&a=2",
            headers = { ["X-Test"] = "t", ["X-Multi"] = { "1", "2" }, Cookie = "c=cookie",
                        ["Content-Type"] = "text/plain", Host = "Example.COM:8080" },
            body = "payload",
        })
        assert.equals(200, r.status)
        local j = mf.json.decode(r.body)
        assert.equals("127.0.0.1", j.remote_addr)
        assert.equals("7f000001", j.binary_remote_addr)
        assert.matches("^%d+$", j.remote_port)
        assert.equals("127.0.0.1", j.server_addr)
        assert.equals(serve_port, j.server_port)
        assert.equals("http", j.scheme)
        assert.equals("", j.https)
        assert.equals("example.com", j.host)
        assert.is_string(j.hostname)
        assert.equals("POST", j.request_method)
        local uri = "/ngx_api?case=vars&a=1&UPPER=u&flag&esc=a%20b&a=2"
        assert.equals(uri, j.request_uri)
        assert.equals("/ngx_api", j.uri)
        assert.equals("/ngx_api", j.document_uri)
        assert.equals("case=vars&a=1&UPPER=u&flag&esc=a%20b&a=2", j.args)
        assert.equals("?", j.is_args)
        assert.equals("1", j.arg_a)         -- the first
        assert.equals("u", j.arg_upper)     -- any case
        assert.is_nil(j.arg_flag)           -- no "="
        assert.equals("a%20b", j.arg_esc)   -- as sent
        assert.equals("t", j.http_x_test)
        assert.equals("1, 2", j.http_x_multi)
        assert.equals("cookie", j.cookie_c)
        assert.equals("text/plain", j.content_type)
        assert.equals("7", j.content_length)
        assert.equals("payload", j.request_body)
        assert.equals(tostring(j.raw_header_len + j.body_len), j.request_length)
        assert.matches("^%d+%.%d%d%d$", j.request_time)
        assert.is_true(tonumber(j.request_time) < 1)
        assert.equals("200", j.status)
        assert.equals("0", j.body_bytes_sent)
        assert.equals(r.headers["x-request-id"], j.request_id)
        assert.equals("POST " .. uri .. " HTTP/1.1", j.request)
        assert.equals("HTTP/1.1", j.server_protocol)
        assert.is_true(math.abs(tonumber(j.msec) - ngx.now()) < 1)
        assert.matches("^%d+%.%d+%.%d+$", j.nginx_version)
        assert.is_nil(j.unknown)
        assert.equals("mine", j.my_var)
        assert.equals("x=1&y=2", j.args_after)
        assert.equals("1", j.arg_x_after)
        assert.matches('ngx.var.uri: variable "uri" not changeable', j.uri_not_changeable, 1, true)
        assert.matches('variable "query_string" not changeable', j.query_string_not_changeable, 1, true)
        assert.matches('variable "http_x_test" not changeable', j.http_not_changeable, 1, true)
    end)

    it("reads and changes the request (ngx.req)", function()
        local r = get("req", {
            method = "POST", query = "&a=1&a=2",
            headers = { ["X-Test"] = "t", ["X-Multi"] = { "1", "2" },
                        ["Content-Type"] = "application/x-www-form-urlencoded" },
            body = "p=1&q=two+words",
        })
        assert.equals(200, r.status)
        local j = mf.json.decode(r.body)
        assert.equals("t", j.header_lower)
        assert.equals("t", j.header_underscore)
        assert.are.same({ "1", "2" }, j.header_multi)
        assert.equals("truncated", j.truncated)
        assert.equals("t", j.raw_case)
        assert.equals("yes", j.after_set)
        assert.equals("yes", j.var_after_set)
        assert.is_true(j.cleared)
        assert.are.same({ case = "req", a = { "1", "2" } }, j.uri_args)
        assert.are.same({ k = "v w" }, j.uri_args_after)
        assert.equals("k=v%20w", j.var_args_after)
        assert.equals("/elsewhere", j.uri_after)
        assert.matches("ngx.req.set_uri: jump", j.set_uri_jump, 1, true)
        assert.equals("p=1&q=two+words", j.body)
        assert.are.same({ p = "1", q = "two words" }, j.post_args)
        assert.is_true(j.body_file)
        assert.equals(1.1, j.http_version)
        assert.matches("^POST /ngx_api%?case=req&a=1&a=2 HTTP/1%.1\r\n", j.raw_header)
        assert.matches("\r\nX%-Test: t\r\n", j.raw_header)
        assert.matches("\r\n\r\n$", j.raw_header)
        assert.equals(j.raw_header:gsub("^[^\n]*\n", ""), j.raw_header_no_line)
        assert.is_true(j.start_time_ago >= 0 and j.start_time_ago < 1, tostring(j.start_time_ago))
        assert.equals("POST", j.method)
        assert.equals("PUT", j.method_after)
        assert.equals("PUT", j.var_method_after)
        assert.is_false(j.is_internal)
        assert.is_false(j.is_subrequest)
        assert.matches("ngx.req.set_body_file: request bodies are never files here", j.set_body_file, 1, true)
    end)

    it("answers with ngx.status, ngx.header, ngx.say/print (tables flattened) and ngx.flush", function()
        local r = get("say")
        assert.equals(201, r.status)
        assert.equals("1", r.headers["x-a"])
        assert.equals("a, b", r.headers["x-multi"]) -- two fields, joined by the client
        assert.equals("text/x-ngx", r.headers["content-type"])
        assert.is_nil(r.headers["x-late"])
        assert.is_nil(r.headers["content-length"]) -- streamed: chunked
        local first, json, last = r.body:match("^([^\n]*)\n([^\n]*)\n(.*)$")
        assert.equals("a1truenilnullbc", first)
        assert.equals("end:201", last)
        local before = mf.json.decode(json)
        assert.equals(201, before.status)
        assert.equals("1", before.x_a)
        assert.are.same({ "a", "b" }, before.multi)
        assert.equals("999", before.content_length)
        assert.is_false(before.sent)
        assert.is_true(before.sent_after)
        assert.equals("1", before.resp_x_a)
        assert.equals("text/x-ngx", before.resp_type)
    end)

    it("refuses what ngx.say cannot write, as OpenResty does", function()
        local r = get("bad_say")
        assert.matches("false bad argument #1 to 'say' (non-array table found)", r.body, 1, true)
        assert.matches("false bad argument #1 to 'print' (string, number, boolean, nil, " ..
                       "ngx.null or array table expected, got function)", r.body, 1, true)
    end)

    it("ends the answer at ngx.eof while the handler goes on", function()
        local t0 = ngx.now()
        local r = get("eof", { query = "&x=1", headers = { ["X-Test"] = "t" } })
        assert.equals(200, r.status)
        assert.equals("before eof\n", r.body)
        assert.is_true(ngx.now() - t0 < 0.25, "the answer waited for the handler's end")
        ngx.sleep(0.4)
        local j = mf.json.decode(get("eof_result").body)
        assert.is_nil(j.ok)
        assert.equals("seen eof", j.err)
        -- the request stays readable after its answer
        assert.equals("/ngx_api", j.uri)
        assert.equals("200", j.status)
        assert.is_true(tonumber(j.request_time) >= 0.3, j.request_time)
        assert.equals("GET", j.method)
        assert.equals("1", j.arg)
        assert.equals("t", j.header)
        assert.is_true(j.sent)
        assert.is_nil(j.set_status) -- logged and left, no raise
        assert.equals("seen eof", j.eof_again)
    end)

    it("sends the head at ngx.send_headers", function()
        local r = get("send_headers")
        assert.equals(200, r.status)
        assert.equals("yes", r.headers["x-early"])
        assert.equals("sent=true again=nil header already sent\n", r.body)
    end)

    it("leaves a 101 head for the raw connection (send_headers and flush start no stream)", function()
        local r = get("upgrade_head")
        assert.equals(200, r.status)
        assert.equals("sent=true streaming=false", r.body)
        assert.is_nil(r.headers["transfer-encoding"])
    end)

    it("redirects with ngx.redirect", function()
        local r = get("redirect")
        assert.equals(301, r.status)
        assert.equals("/ok?from=ngx", r.headers.location)
        r = get("bad_redirect")
        assert.matches("ngx.redirect: only ngx.HTTP_MOVED_TEMPORARILY", r.body, 1, true)
    end)

    it("binds a subrequest's ngx to the subrequest", function()
        local j = mf.json.decode(get("capture").body)
        assert.equals(202, j.status)
        assert.equals("/ngx_api case=sub&n=1 true 1", j.body)
        assert.equals("yes", j.header)
        assert.is_false(j.parent_sub)
    end)

    it("gives a Lua thread the handler spawns the handler's request", function()
        local j = mf.json.decode(get("thread").body)
        assert.is_true(j.ok)
        assert.equals("/ngx_api", j.err) -- pcall's second value: ngx.var.uri
    end)
end)
