-- lua-resty-core and lua-nginx-string, Debian's files unchanged, on the C
-- functions the moonflow binary exports under nginx's names (lua/ngx_ffi),
-- checked against OpenResty's documented results.
local mf = require "moonflow"
local ffi = require "ffi"

describe("lua-resty-core on moonflow", function()
    local ngx = require "moonflow.ngx"
    local saved = {}
    local dict = mf.shared_dict("resty_core_spec", 1024 * 1024)

    setup(function()
        for k, v in pairs(ngx) do saved[k] = v end
    end)
    teardown(function() -- the other specs see moonflow.ngx's own functions
        for k in pairs(ngx) do ngx[k] = nil end
        for k, v in pairs(saved) do ngx[k] = v end
    end)

    it("loads whole", function()
        local core = require "resty.core"
        assert.equals("0.1.25", core.version)
        assert.equals(ngx, _G.ngx)
    end)

    it("encodes and decodes base64 (resty.core.base64, ngx.base64)", function()
        require "resty.core.base64"
        assert.equals("aGVsbG8=", ngx.encode_base64("hello"))
        assert.equals("aGVsbG8", ngx.encode_base64("hello", true))
        assert.equals("", ngx.encode_base64(""))
        assert.equals("hello", ngx.decode_base64("aGVsbG8="))
        assert.equals("hello", ngx.decode_base64("aGVsbG8"))
        assert.is_nil(ngx.decode_base64("not base64!"))
        local big = ("\0\1\2\255"):rep(3000) -- past resty.core's 4 KiB buffer
        assert.equals(big, ngx.decode_base64(ngx.encode_base64(big)))
        local b64 = require "ngx.base64"
        assert.equals("-_8", b64.encode_base64url("\251\255"))
        assert.equals("\251\255", b64.decode_base64url("-_8"))
        local bad, err = b64.decode_base64url("a")
        assert.is_nil(bad)
        assert.equals("invalid input", err)
    end)

    it("hashes (resty.core.hash)", function()
        require "resty.core.hash"
        assert.equals("5d41402abc4b2a76b9719d911017c592", ngx.md5("hello"))
        assert.equals(mf.crypto.md5("hello"), ngx.md5_bin("hello"))
        assert.equals(mf.crypto.sha1("hello"), ngx.sha1_bin("hello"))
        assert.equals(0x3610a686, ngx.crc32_short("hello"))
        assert.equals(0x3610a686, ngx.crc32_long("hello"))
        assert.equals(0, ngx.crc32_long(""))
    end)

    it("escapes URIs (resty.core.uri)", function()
        require "resty.core.uri"
        assert.equals("b%20r56%2B7", ngx.escape_uri("b r56+7"))
        assert.equals("-_.%21~%2A%27%28%29", ngx.escape_uri("-_.!~*'()"))
        assert.equals("/a%20b%3F/c+d", ngx.escape_uri("/a b?/c+d", 0))
        assert.equals("a%26b%2Bc", ngx.escape_uri("a&b+c", 1))
        assert.equals("%E4%BD%A0", ngx.escape_uri("\228\189\160"))
        assert.equals("b r56 7", ngx.unescape_uri("b%20r56+7"))
        assert.equals("100%", ngx.unescape_uri("100%"))
        assert.equals("%zz/", ngx.unescape_uri("%zz%2F"))
    end)

    it("tells the time (resty.core.time)", function()
        local time = require "resty.core.time"
        local now = ngx.now()
        assert.is_true(math.abs(math.floor(now) - os.time()) <= 1) -- whole seconds: time(2) reads the coarse clock
        local ms = now * 1000 -- whole milliseconds, as nginx's
        assert.is_true(math.abs(ms - math.floor(ms + 0.5)) < 1e-3)
        assert.is_true(math.abs(ngx.time() - os.time()) <= 1)
        assert.equals(os.date("%Y-%m-%d"), ngx.today())
        assert.matches("^%d%d%d%d%-%d%d%-%d%d %d%d:%d%d:%d%d$", ngx.localtime())
        assert.matches("^%d%d%d%d%-%d%d%-%d%d %d%d:%d%d:%d%d$", ngx.utctime())
        assert.equals("Thu, 18 Nov 2010 11:27:35 GMT", ngx.http_time(1290079655))
        assert.equals("Thu, 18-Nov-10 11:27:35 GMT", ngx.cookie_time(1290079655))
        assert.equals("Wed, 01-Jan-2048 00:00:00 GMT", ngx.cookie_time(2461449600))
        assert.equals(1290079655, ngx.parse_http_time("Thu, 18 Nov 2010 11:27:35 GMT"))
        assert.equals(1290079655, ngx.parse_http_time("Thursday, 18-Nov-10 11:27:35 GMT"))
        assert.equals(1290079655, ngx.parse_http_time("Thu Nov 18 11:27:35 2010"))
        assert.is_nil(ngx.parse_http_time("yesterday"))
        ffi.cdef [[
            typedef struct { long sec, nsec; } spec_timespec_t;
            int clock_gettime(int clock, spec_timespec_t *ts);
        ]]
        local ts = ffi.new("spec_timespec_t")
        ffi.C.clock_gettime(1, ts) -- CLOCK_MONOTONIC
        local ms = tonumber(ts.sec) * 1000 + tonumber(ts.nsec) / 1e6
        assert.is_true(math.abs(time.monotonic_msec() - ms) < 5)
        assert.is_true(math.abs(time.monotonic_time() - ms / 1000) < 0.005)
        ngx.update_time()
    end)

    it("knows the worker (resty.core.worker)", function()
        require "resty.core.worker"
        ffi.cdef "int getpid(void);"
        assert.equals(mf.worker.id, ngx.worker.id())
        assert.equals(mf.worker.count, ngx.worker.count())
        assert.equals(ffi.C.getpid(), ngx.worker.pid())
        assert.is_false(ngx.worker.exiting())
    end)

    it("matches, finds and substitutes on PCRE2 (resty.core.regex, ngx.re)", function()
        require "resty.core.regex"
        local m = ngx.re.match("hello, 1234", "(?<word>[a-z]+), (\\d)\\d+", "jo")
        assert.are.same({ [0] = "hello, 1234", "hello", "1", word = "hello" }, m)
        assert.is_nil(ngx.re.match("abc", "x"))
        assert.equals("B", ngx.re.match("ABC", "b", "i")[0])
        assert.is_false(ngx.re.match("a", "(b)?a")[1])
        assert.are.same({ 8, 11 }, { ngx.re.find("hello, 1234", "[0-9]+", "jo") })
        local ctx = { pos = 3 }
        assert.equals("34", ngx.re.match("1234, hello", "[0-9]+", "", ctx)[0])
        assert.equals(5, ctx.pos)
        local words = {}
        for w in ngx.re.gmatch("hello, world", "[a-z]+", "j") do words[#words + 1] = w[0] end
        assert.are.same({ "hello", "world" }, words)
        assert.are.same({ "[hello,h], world", 1 }, { ngx.re.sub("hello, world", "([a-z])[a-z]+", "[$0,$1]") })
        assert.are.same({ "[hello,hx], [world,wx]", 2 },
                        { ngx.re.gsub("hello, world", "([a-z])[a-z]+", "[$0,${1}x]") })
        assert.are.same({ "a$b$c", 2 }, { ngx.re.gsub("a.b.c", "\\.", "$$") })
        assert.are.same({ "<hello>, <world>", 2 },
                        { ngx.re.gsub("hello, world", "[a-z]+", function(w) return "<" .. w[0] .. ">" end) })
        assert.are.same({ nil, nil, "failed to compile the replacement template" },
                        { ngx.re.sub("abc", "b", "$x") })
        local bad, err = ngx.re.match("abc", "(")
        assert.is_nil(bad)
        assert.matches("missing closing parenthesis", err)
        assert.equals("ll", ngx.re.match("hello", "l+", "d")[0])
        assert.are.same({ "a", "b", "", "c" }, (require "ngx.re").split("a,b,,c", ","))
    end)

    it("replaces characters (resty.core.utils)", function()
        local utils = require "resty.core.utils"
        assert.equals("a-b-c", utils.str_replace_char("a_b_c", "_", "-"))
    end)

    it("keeps moonflow.ngx's request-bound API (resty.core.var, .phase ...)", function()
        local var = ngx.var
        require "resty.core.var"
        require "resty.core.phase"
        assert.equals(var, ngx.var)
        assert.is_function(require("resty.core.ctx").get_ctx_table)
    end)

    describe("resty.core.shdict's entry points on a moonflow dict", function()
        require "resty.core.shdict" -- declares them
        local C = ffi.C
        local zone = C.ngx_http_lua_ffi_shdict_udata_to_zone(dict)
        local errmsg = ffi.new("char *[1]")
        local forcible = ffi.new("int[1]")

        local function store(op, key, value, exptime)
            local vt, s, n = 0, nil, 0
            if type(value) == "string" then vt, s = 4, value
            elseif type(value) == "number" then vt, n = 3, value
            elseif type(value) == "boolean" then vt, n = 1, value and 1 or 0 end
            local rc = C.ngx_http_lua_ffi_shdict_store(zone, op, key, #key, vt, s,
                s and #s or 0, n, (exptime or 0) * 1000, 7, errmsg, forcible)
            if rc == 0 then return true end
            return false, ffi.string(errmsg[0])
        end

        local function get(key, bufsize)
            local vt, buf = ffi.new("int[1]"), ffi.new("unsigned char[?]", bufsize or 64)
            local sbuf, len = ffi.new("unsigned char *[1]", buf), ffi.new("size_t[1]", bufsize or 64)
            local num, flags, stale = ffi.new("double[1]"), ffi.new("int[1]"), ffi.new("int[1]")
            local rc = C.ngx_http_lua_ffi_shdict_get(zone, key, #key, vt, sbuf, len,
                num, flags, 0, stale, errmsg)
            if rc ~= 0 then return nil, ffi.string(errmsg[0]) end
            if vt[0] == 0 then return nil end
            if vt[0] == 3 then return tonumber(num[0]), flags[0] end
            if vt[0] == 1 then return buf[0] ~= 0, flags[0] end
            local s = ffi.string(sbuf[0], len[0])
            if sbuf[0] ~= buf then C.free(sbuf[0]) end
            return s, flags[0]
        end

        before_each(function() dict:flush_all(); dict:flush_expired() end)

        it("finds the dict and shares its entries with mf.shared", function()
            assert.equals(1024 * 1024, tonumber(C.ngx_http_lua_ffi_shdict_capacity(zone)))
            assert.is_true(tonumber(C.ngx_http_lua_ffi_shdict_free_space(zone)) > 0)
            assert.is_true(store(0, "s", "text"))
            assert.equals("text", dict:get("s"))
            dict:set("n", 42)
            assert.are.same({ 42, 0 }, { get("n") })
            assert.are.same({ "text", 7 }, { get("s") })
            assert.is_true(store(0, "b", false))
            assert.equals(false, dict:get("b"))
            assert.equals(false, get("b"))
            local big = ("x"):rep(10000) -- longer than the caller's buffer
            assert.is_true(store(0, "big", big))
            assert.equals(big, get("big"))
            assert.is_nil(get("missing"))
        end)

        it("answers add, replace, delete and lists with OpenResty's words", function()
            assert.is_true(store(1, "k", "v"))
            assert.are.same({ false, "exists" }, { store(1, "k", "w") })
            assert.are.same({ false, "not found" }, { store(2, "other", "w") })
            assert.is_true(store(0, "k", nil))
            assert.is_nil(dict:get("k"))
            dict:lpush("list", "a")
            assert.are.same({ nil, "value is a list" }, { get("list") })
        end)

        it("increments", function()
            local value = ffi.new("double[1]", 5)
            local rc = C.ngx_http_lua_ffi_shdict_incr(zone, "c", 1, value, errmsg, 0, 0, 0, forcible)
            assert.equals(-1, rc)
            assert.equals("not found", ffi.string(errmsg[0]))
            rc = C.ngx_http_lua_ffi_shdict_incr(zone, "c", 1, value, errmsg, 1, 10, 0, forcible)
            assert.equals(0, rc)
            assert.equals(15, value[0])
            assert.equals(15, dict:get("c"))
            dict:set("t", "text")
            rc = C.ngx_http_lua_ffi_shdict_incr(zone, "t", 1, value, errmsg, 0, 0, 0, forcible)
            assert.equals("not a number", ffi.string(errmsg[0]))
        end)

        it("reads and sets TTLs, and flushes", function()
            dict:set("ttl", 1, 10)
            local ttl = tonumber(C.ngx_http_lua_ffi_shdict_get_ttl(zone, "ttl", 3))
            assert.is_true(ttl > 9000 and ttl <= 10000)
            assert.equals(-5, tonumber(C.ngx_http_lua_ffi_shdict_get_ttl(zone, "none", 4)))
            assert.equals(0, C.ngx_http_lua_ffi_shdict_set_expire(zone, "ttl", 3, 0))
            assert.equals(0, tonumber(C.ngx_http_lua_ffi_shdict_get_ttl(zone, "ttl", 3)))
            assert.equals(-5, C.ngx_http_lua_ffi_shdict_set_expire(zone, "none", 4, 5))
            C.ngx_http_lua_ffi_shdict_flush_all(zone)
            assert.is_nil(dict:get("ttl"))
        end)

        it("leaves mf.shared's methods in place", function()
            dict:set("m", "v", 0, 3)
            assert.are.same({ "v", 3 }, { dict:get("m") })
            assert.equals(1, dict:incr("i", 1, 0))
        end)
    end)

    it("runs ngx.semaphore on mf.semaphore", function()
        local semaphore = require "ngx.semaphore"
        local sema = semaphore.new(0)
        assert.equals(0, sema:count())
        assert.are.same({ nil, "timeout" }, { sema:wait(0.01) })
        mf.timer.at(10, function() sema:post(1) end)
        assert.is_true(sema:wait(1))
        sema:post(2)
        assert.equals(2, sema:count())
    end)
end)

describe("lua-nginx-string (nginx.string)", function()
    require "moonflow.ngx"
    local str = require "nginx.string"

    it("writes hex", function()
        assert.equals("", str.to_hex(""))
        assert.equals("00ff61", str.to_hex("\0\255a"))
        local md5 = require "nginx.md5"
        local h = md5:new()
        h:update("hello")
        assert.equals("5d41402abc4b2a76b9719d911017c592", str.to_hex(h:final()))
        local sha1 = (require "nginx.sha1"):new()
        sha1:update("hel")
        sha1:update("lo")
        assert.equals(mf.hex.encode(mf.crypto.sha1("hello")), str.to_hex(sha1:final()))
        local sha256 = (require "nginx.sha256"):new()
        sha256:update("hello")
        assert.equals(mf.hex.encode(mf.crypto.sha256("hello")), str.to_hex(sha256:final()))
    end)

    it("reads decimal numbers as nginx's ngx_atoi", function()
        assert.equals(12345, str.atoi("12345"))
        assert.equals(0, str.atoi("0"))
        assert.equals(-1, str.atoi(""))
        assert.equals(-1, str.atoi("12a"))
        assert.equals(-1, str.atoi("-3"))
        assert.equals(-1, str.atoi("99999999999999999999"))
    end)
end)
